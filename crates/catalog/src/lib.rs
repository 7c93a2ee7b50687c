//! A catalog of btrfs send stream files: for every night (stream) of a
//! chain, every path with its metadata and, for regular files, where each
//! byte range of data lies in the stream files, kept in one SQLite file.
//! From it a directory can be listed and a path restored as of any night,
//! reading only the byte ranges it needs, with no replay of the chain.
//!
//! [`Catalog::add`] adds a stream file's nights; [`Catalog::list`],
//! [`Catalog::resolve`] and friends read one night's state; [`restore`]
//! writes a path out; [`check`] verifies that every stream file still
//! holds what the catalog points at.

pub mod check;
pub mod error;
pub mod find;
pub mod layout;
pub mod night;
pub mod restore;
pub mod schema;
pub mod source;
pub mod state;

pub use error::{Error, Result};
pub use layout::{Layout, Piece};
pub use night::{add_file, cataloged, Added};
pub use state::{uuid_text, Catalog, Inode, Snapshot, Time};
