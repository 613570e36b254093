//! `mint_usage`: how an agent makes a credentialed request through the Mint proxy.
//!
//! The payload is `mint_policy::usage::usage`, the one source shared with `mint usage`: the
//! route, the `Mint-Capability` header, the `{{mint:ALIAS}}` placeholder, the four tool names and
//! a curl example. It holds no credential material and reads no file.

use super::{Arguments, pretty};
use crate::jsonrpc::RpcError;
use crate::paths::Config;

/// Describes the proxy at the configured listen address. Takes no argument.
pub(super) fn call(_args: Arguments<'_>, config: &Config) -> Result<String, RpcError> {
    pretty(&mint_policy::usage::usage(&config.listen))
}
