//! What a benchmark needs to call the daemon's HTTP fronts: the address of a URL and an MCP session.

use crate::sse;

/// `http://host:port` without its scheme.
pub(crate) fn addr_of(url: &str) -> &str {
    let rest = url.trim_start_matches("http://");
    rest.split_once('/').map_or(rest, |(a, _)| a)
}

/// Opens an MCP session on the daemon (initialize, then initialized) with the operator's token; its id.
pub(crate) async fn mcp_session(http: &str, bearer: &str) -> Result<String, String> {
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "agentwire-bench", "version": "1"}}});
    let accept = ("Accept", "application/json, text/event-stream");
    let auth = ("Authorization", bearer);
    let head = sse::post(
        addr_of(http),
        "/mcp",
        &[accept, auth],
        &init.to_string(),
        |_, _| {},
    )
    .await?;
    let session = head
        .header("mcp-session-id")
        .ok_or(format!(
            "MCP initialize: HTTP {} and no session",
            head.status
        ))?
        .to_string();
    let done = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    sse::post(
        addr_of(http),
        "/mcp",
        &[accept, auth, ("Mcp-Session-Id", &session)],
        &done.to_string(),
        |_, _| {},
    )
    .await?;
    Ok(session)
}
