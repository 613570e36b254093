//! Mint's end-to-end tests: one test binary, one module per area.

mod approvals;
mod approvals_clients;
mod audit_crash;
mod audit_disk_full;
mod connection_framing;
mod demo;
mod examples;
mod inert_placeholders;
mod interception;
mod interception_clients;
mod interception_tunnel;
mod local_files;
mod mint_run;
mod operator_ux;
mod policy_findings;
mod proxy;
mod proxy_attacks;
mod proxy_connections;
mod proxy_edges;
mod proxy_mcp;
mod proxy_outcomes;
mod proxy_reload;
mod request_body;
mod scrub_oracle;
