//! Checksummed blocks: after the header, a trace is a sequence of blocks, each a payload
//! length (u32), the CRC-32 of the payload (u32) and the payload (FORMAT.md, "Blocks").
//! Records may span blocks; a reader verifies a whole block before decoding any of it, so a
//! flipped bit is reported as corruption instead of being read as a different trace.

use std::io::{self, Read, Write};

/// Largest block payload a writer produces and a reader accepts.
pub const MAX_BLOCK_BYTES: u32 = 1 << 20;

/// Writes one block holding `payload` (at most `MAX_BLOCK_BYTES`).
pub(super) fn write_block<W: Write>(out: &mut W, payload: &[u8]) -> io::Result<u64> {
    debug_assert!(payload.len() <= MAX_BLOCK_BYTES as usize);
    out.write_all(&(payload.len() as u32).to_le_bytes())?;
    out.write_all(&crc32fast::hash(payload).to_le_bytes())?;
    out.write_all(payload)?;
    Ok(8 + payload.len() as u64)
}

/// Why a block could not be read.
pub(super) enum BlockError {
    Io(io::Error),
    /// The input ended inside the block header or payload.
    Truncated,
    /// Length out of range, or checksum mismatch.
    Bad(String),
}

/// Reads `buf.len()` bytes; `Ok(n < len)` at end of input.
pub(super) fn read_full<R: Read>(input: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Reads the next block's payload into `buf`; `Ok(None)` at a clean end of input.
pub(super) fn read_block<R: Read>(
    input: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Option<usize>, BlockError> {
    let mut head = [0u8; 8];
    match read_full(input, &mut head).map_err(BlockError::Io)? {
        0 => return Ok(None),
        8 => {}
        _ => return Err(BlockError::Truncated),
    }
    let len = u32::from_le_bytes(head[..4].try_into().unwrap());
    let crc = u32::from_le_bytes(head[4..].try_into().unwrap());
    if len == 0 || len > MAX_BLOCK_BYTES {
        return Err(BlockError::Bad(format!(
            "block length {len} out of range (1-{MAX_BLOCK_BYTES})"
        )));
    }
    buf.resize(len as usize, 0);
    if read_full(input, buf).map_err(BlockError::Io)? < len as usize {
        return Err(BlockError::Truncated);
    }
    let found = crc32fast::hash(buf);
    if found != crc {
        return Err(BlockError::Bad(format!(
            "checksum mismatch (stored {crc:08x}, computed {found:08x}): the trace is corrupt"
        )));
    }
    Ok(Some(len as usize))
}
