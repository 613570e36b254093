//! Answers one input line: `initialize`, `ping`, `tools/list` and `tools/call`, each with one
//! response line; blank lines, undecodable lines and notifications with none.
//!
//! Sits between `transport` (lines in, lines out) and `tools`. Stateless: no request depends on
//! an earlier one, so a client may skip `initialize`. Every response line stays within the
//! 1 MiB message limit an agent enforces; an answer that would not fit becomes an error. Logs
//! name the kind of problem and never what the line or a file held.

use std::panic::{self, AssertUnwindSafe};

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::jsonrpc::{
    self, Decoded, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Request, RpcError,
};
use crate::paths::Config;
use crate::tools;
use crate::transport::MAX_MESSAGE_BYTES;

/// The protocol versions this server speaks, oldest first. A client asking for another one gets
/// the newest.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The server: its configuration and the precomputed `tools/list` result.
#[derive(Debug)]
pub struct Server {
    config: Config,
    tools_list: Option<Box<RawValue>>,
}

// === impl Server ===

impl Server {
    /// A server reading the files `config` names.
    pub fn new(config: Config) -> Server {
        let tools_list = tools::list()
            .inspect_err(|_| tracing::error!("Cannot build the tool list"))
            .ok();
        Server { config, tools_list }
    }

    /// Answers one input line (without its line feed). Returns the response line, without a
    /// line feed, or `None` when the line gets no response: blank, not UTF-8, not JSON, or a
    /// notification.
    pub fn handle_line(&self, line: &[u8]) -> Option<String> {
        match jsonrpc::decode(line) {
            Decoded::Blank => None,
            Decoded::NotUtf8 { valid_up_to } => {
                tracing::warn!(byte = valid_up_to, "Ignored a line that is not valid UTF-8");
                None
            }
            Decoded::Malformed { column, kind } => {
                tracing::warn!(column, problem = kind, "Ignored a line that is not JSON");
                None
            }
            Decoded::Notification { method } => {
                tracing::debug!(
                    method = method.as_deref().map_or("(none)", log_name),
                    "Notification received"
                );
                None
            }
            Decoded::Invalid { id, problem } => {
                tracing::info!(problem, "Invalid request");
                Some(fit(&id, Err(RpcError::new(INVALID_REQUEST, problem))))
            }
            Decoded::Request(request) => Some(self.answer(request)),
        }
    }

    fn answer(&self, request: Request) -> String {
        let Request { id, method, params } = request;
        let name = log_name(&method);
        // A bug must cost one request, not the session: the panic hook has logged where it was.
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| self.dispatch(&method, params)))
            .unwrap_or_else(|_| Err(RpcError::new(INTERNAL_ERROR, "internal error")));
        match &outcome {
            Ok(_) => tracing::debug!(method = name, "Request answered"),
            Err(error) => tracing::info!(method = name, code = error.code, "Request failed"),
        }
        fit(&id, outcome)
    }

    fn dispatch(&self, method: &str, params: Option<Value>) -> Result<Box<RawValue>, RpcError> {
        match method {
            "initialize" => initialize(&object(params)?),
            "ping" => {
                object(params)?;
                raw(&Map::new())
            }
            "tools/list" => {
                object(params)?;
                self.tools_list
                    .clone()
                    .ok_or_else(|| RpcError::new(INTERNAL_ERROR, "internal error"))
            }
            "tools/call" => self.call_tool(&object(params)?),
            other => Err(RpcError::new(
                INTERNAL_ERROR,
                format!("unknown method {}", tools::quote(other)),
            )),
        }
    }

    fn call_tool(&self, params: &Map<String, Value>) -> Result<Box<RawValue>, RpcError> {
        let Some(Value::String(name)) = params.get("name") else {
            return Err(RpcError::new(
                INVALID_PARAMS,
                "`name` must be the tool's name as a string",
            ));
        };
        // The tool first: an unknown tool is reported as such whatever its arguments.
        let text = tools::call(name, params.get("arguments"), &self.config)?;
        tools::content(&text).map_err(|_| RpcError::new(INTERNAL_ERROR, "internal error"))
    }
}

/// The response line for `outcome`, within the message limit: an error whose `data` is too
/// long keeps its first findings, and anything else too long becomes an error.
fn fit(id: &RawValue, outcome: Result<Box<RawValue>, RpcError>) -> String {
    let line = match &outcome {
        Ok(result) => jsonrpc::success(id, result),
        Err(error) => jsonrpc::failure(id, error),
    };
    if line.len() < MAX_MESSAGE_BYTES {
        return line;
    }
    tracing::warn!(bytes = line.len(), "Response over the message limit");
    if let Err(RpcError {
        code,
        message,
        data: Some(data),
    }) = outcome
        && let Ok(mut findings) = serde_json::from_str::<Vec<Box<RawValue>>>(data.get())
    {
        findings.truncate(MAX_FINDINGS_WHEN_LONG);
        let line = jsonrpc::failure(
            id,
            &RpcError {
                code,
                message,
                data: serde_json::value::to_raw_value(&findings).ok(),
            },
        );
        if line.len() < MAX_MESSAGE_BYTES {
            return line;
        }
    }
    jsonrpc::failure(
        id,
        &RpcError::new(
            INTERNAL_ERROR,
            "the result is larger than the 1 MiB message limit",
        ),
    )
}

/// The `initialize` result: the client's protocol version when this server speaks it, else the
/// newest; the server's name and version; the tools capability.
fn initialize(params: &Map<String, Value>) -> Result<Box<RawValue>, RpcError> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Initialize {
        protocol_version: &'static str,
        capabilities: Capabilities,
        server_info: ServerInfo,
    }
    #[derive(Serialize)]
    struct Capabilities {
        tools: Map<String, Value>,
    }
    #[derive(Serialize)]
    struct ServerInfo {
        name: &'static str,
        version: &'static str,
    }
    let requested = params.get("protocolVersion").and_then(Value::as_str);
    let protocol_version = PROTOCOL_VERSIONS
        .into_iter()
        .find(|version| Some(*version) == requested)
        .unwrap_or(NEWEST_PROTOCOL_VERSION);
    raw(&Initialize {
        protocol_version,
        capabilities: Capabilities { tools: Map::new() },
        server_info: ServerInfo {
            name: "mint-mcp",
            version: env!("CARGO_PKG_VERSION"),
        },
    })
}

/// A method's params: absent or null mean no parameter; anything but an object is invalid.
fn object(params: Option<Value>) -> Result<Map<String, Value>, RpcError> {
    match params {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(params)) => Ok(params),
        Some(_) => Err(RpcError::new(INVALID_PARAMS, "`params` must be an object")),
    }
}

fn raw(value: &impl Serialize) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(value)
        .map_err(|_| RpcError::new(INTERNAL_ERROR, "internal error"))
}

/// A method name fit for a log line: known names as they are, anything else as `other`, so a log
/// never repeats what a client made up.
fn log_name(method: &str) -> &'static str {
    const KNOWN: [&str; 7] = [
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "notifications/initialized",
        "notifications/cancelled",
        "server/discover",
    ];
    KNOWN
        .into_iter()
        .find(|known| *known == method)
        .unwrap_or("other")
}

// INVARIANT: the array is not empty; an out-of-bounds index in a const fails to compile.
const NEWEST_PROTOCOL_VERSION: &str = PROTOCOL_VERSIONS[PROTOCOL_VERSIONS.len() - 1];

/// How many findings an error keeps in `data` when all of them would not fit.
const MAX_FINDINGS_WHEN_LONG: usize = 100;

#[cfg(test)]
mod tests;
