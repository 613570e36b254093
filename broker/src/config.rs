//! Where Mint's files are and how they are read: the paths and environment variables
//! ([`env`](mod@env)), the StrictModes-style checks of every file and directory Mint opens or
//! writes ([`secure_file`]), reading a declaration file ([`declaration_file`]), loading the policy,
//! the aliases and their secrets together ([`declarations`]), reloading them while Mint runs
//! ([`reload`]), reading command and Vault secrets again when their cache time runs out
//! ([`refresh`]) and judging the listen address ([`listen`]).
//!
//! The only room that opens Mint's own files. It refuses a file another user could change, never
//! puts a file's contents in an error or a log line, and leaves what the files mean to
//! `mint-policy`.

pub mod ca_files;
pub mod declaration_file;
pub mod declarations;
pub mod env;
pub mod listen;
pub mod placeholder_key;
pub mod refresh;
pub mod reload;
pub mod secure_file;
