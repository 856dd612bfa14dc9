//! What was measured on a real kernel, as data: each path's recorded footprint (the text it
//! runs, the objects it touches, its native latency: footprint.rs, path_footprint.rs), the
//! paths derived from a recorded one (derived.rs), the functions ftrace saw each path call
//! (traced.rs) and the image data and direct-map lines it reads and writes under qemu
//! (image_data.rs). Parsing and checking only: `paths/` compiles these into the paths the
//! kernel runs.

pub mod derived;
pub mod footprint;
pub mod image_data;
pub mod path_footprint;
pub mod traced;
