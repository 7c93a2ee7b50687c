//! The snapshot strategy: how an incremental stream's subvolume is made
//! from its parent, and what each later change must do first so that the
//! parent is not changed with it.
//!
//! On btrfs a SNAPSHOT is a real snapshot. Elsewhere it is, as
//! [`Snapshot`] chooses: a copy of the parent's tree (`copy`, reflinked
//! where the filesystem can), new directories with hard links to the
//! parent's files (`--link`), or the parent's tree itself changed in place
//! (`--in-place`, with `overlay` keeping what a clone from the parent
//! still needs). Linked and in-place trees keep a work directory in DEST
//! (`workdir`) that says so, for a resumed receive.
//!
//! [`Strategy`] is the one value the engine holds for this: its kind is
//! decided when the snapshot is made ([`Making`]) or reopened after a stop
//! ([`Strategy::reopen`]); before each command the engine asks it to guard
//! what the command would change of the parent's ([`Strategy::guard`]),
//! and on a failure or at END it gives back what it holds
//! ([`Strategy::give_back`]). The engine (`apply`) never matches its
//! kinds.
//!
//! What it may call: the modules below the engine and the destination
//! (`ioctl`, `meta`, `flags`, `error`, `subvol`, `fake_super`, `report`).
//! It never names `apply` or `dest`: what it needs of the tree being
//! received comes through the [`Tree`] trait, and `dest` calls it (to copy
//! a tree, to record a parent taken over), not the reverse. Its submodules
//! never name this file's items, only each other.

pub(crate) mod copy;
mod guard;
mod make;
pub(crate) mod overlay;
mod strategy;
pub(crate) mod workdir;

pub(crate) use guard::Tree;
pub(crate) use make::{copy_parent, Made, Making, Site};
pub use strategy::Snapshot;
pub(crate) use strategy::{Strategy, Taken};
