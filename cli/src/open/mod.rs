//! How arguments become what the commands run: the storage or dataset a path or URL names
//! (`location`, `foreign`, `windows`), the I/O backend (`backend`), the sources of the
//! `batches`/`bench` plans (`windows`, `sequential`, `mixpack`, `order`), state files
//! (`state_file`), and the printing loop of `batches` (`print`). These helpers never use a
//! command module.

pub(crate) mod backend;
pub(crate) mod foreign;
pub(crate) mod location;
pub(crate) mod mixpack;
pub(crate) mod order;
pub(crate) mod print;
pub(crate) mod sequential;
pub(crate) mod state_file;
pub(crate) mod windows;
