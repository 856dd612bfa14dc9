//! One error type for everything a user can get wrong. Each message is one line that names
//! the place (file, field, flag) and what was expected.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl Error {
    pub fn new(msg: impl Into<String>) -> Self {
        Error(msg.into())
    }
    /// An error about `place` (a file, `file: field` or `--flag`).
    pub fn at(place: impl fmt::Display, msg: impl fmt::Display) -> Self {
        Error(format!("{place}: {msg}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Messages stay on one line whatever the underlying parser said.
        f.write_str(&self.0.replace('\n', " "))
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
