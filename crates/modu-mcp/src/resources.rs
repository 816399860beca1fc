//! Resources and prompts of a session's servers.
//!
//! - [`McpSession::list_resources`] and [`McpSession::read_resource`] list the resources and
//!   resource templates of the servers and read one by URI (a template's URI filled in);
//!   [`crate::McpToolProvider::with_resource_tools`] offers them to the model as
//!   `mcp_list_resources` and `mcp_read_resource` ([`crate::tools::McpListResourcesTool`],
//!   [`crate::tools::McpReadResourceTool`]).
//! - [`McpSession::list_prompts`] and [`McpSession::get_prompt`] list the servers' prompts and
//!   fetch one with arguments as modu messages ([`McpPrompt`]), for instructions or a
//!   conversation's first messages; [`McpConnector::get_prompt`] does it without a run.
//!
//! Results carry no credential of the server (redacted as in tool results); a read result is
//! capped at the server's result cap.

use std::sync::Arc;

use futures::future::join_all;
use modu_core::Message;
use rmcp::model::{ContentBlock, ErrorCode, GetPromptRequestParams, ReadResourceRequestParams, ResourceContents, Role};
use rmcp::service::ServiceError;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::client::{McpConnector, ServerConnection};
use crate::describe;
use crate::error::{McpError, McpRequestError, McpServerConfigurationError, RequestFailure, redact, redact_value};
use crate::listing::all_pages;
use crate::output::cap_result;
use crate::session::McpSession;

/// One argument of a server prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct McpPromptArgument {
    /// Its name.
    pub name: String,
    /// What it is for.
    pub description: Option<String>,
    /// Whether the prompt needs it.
    pub required: bool,
}

/// A prompt a server offers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct McpPromptInfo {
    /// The server.
    pub server: String,
    /// The prompt's name on its server.
    pub name: String,
    /// Its title, when the server gave one.
    pub title: Option<String>,
    /// Its description.
    pub description: Option<String>,
    /// Its arguments.
    pub arguments: Vec<McpPromptArgument>,
}

/// The prompts [`McpSession::list_prompts`] listed, and the servers whose listing failed.
/// Iterates over the prompts.
#[derive(Debug)]
#[non_exhaustive]
pub struct McpPromptListing {
    /// The prompts of the servers that listed theirs.
    pub prompts: Vec<McpPromptInfo>,
    /// One error per server whose listing failed ([`McpError::server`] names it); empty
    /// when every server listed its prompts.
    pub failed: Vec<McpError>,
}

impl McpPromptListing {
    /// The prompts.
    pub fn iter(&self) -> std::slice::Iter<'_, McpPromptInfo> {
        self.prompts.iter()
    }

    /// How many prompts were listed.
    pub fn len(&self) -> usize {
        self.prompts.len()
    }

    /// Whether no prompt was listed.
    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty()
    }
}

impl IntoIterator for McpPromptListing {
    type Item = McpPromptInfo;
    type IntoIter = std::vec::IntoIter<McpPromptInfo>;

    fn into_iter(self) -> Self::IntoIter {
        self.prompts.into_iter()
    }
}

impl<'a> IntoIterator for &'a McpPromptListing {
    type Item = &'a McpPromptInfo;
    type IntoIter = std::slice::Iter<'a, McpPromptInfo>;

    fn into_iter(self) -> Self::IntoIter {
        self.prompts.iter()
    }
}

/// A prompt fetched with its arguments: the server's messages as modu messages.
#[derive(Clone, Debug, PartialEq)]
pub struct McpPrompt {
    /// The server.
    pub server: String,
    /// The prompt's name.
    pub name: String,
    /// The description the server sent with it.
    pub description: Option<String>,
    /// The messages (user or assistant), text only: an embedded text resource as its text,
    /// other content (images, audio, links) as its JSON.
    pub messages: Vec<Message>,
}

impl McpPrompt {
    /// The messages' texts, one paragraph each: the prompt as one instruction block.
    pub fn text(&self) -> String {
        self.messages
            .iter()
            .map(Message::text)
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

fn request_error(server: &ServerConnection, request: &str, failure: RequestFailure, message: String) -> McpError {
    McpError::Request(McpRequestError {
        server: server.name.clone(),
        request: request.to_owned(),
        failure,
        message: redact(&message, &server.with_tokens(&server.secrets)),
    })
}

/// Runs one request within the server's call timeout, its failure typed.
async fn ask<T>(
    server: &ServerConnection,
    request: &str,
    future: impl Future<Output = Result<T, ServiceError>>,
) -> Result<T, McpError> {
    match tokio::time::timeout(server.call_timeout, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(ServiceError::McpError(data))) => Err(request_error(
            server,
            request,
            RequestFailure::ProtocolError,
            format!("the server answered with error {}: {}", data.code.0, data.message),
        )),
        Ok(Err(e)) => Err(request_error(
            server,
            request,
            RequestFailure::Transport,
            describe::service(&e).message,
        )),
        Err(_) => Err(request_error(
            server,
            request,
            RequestFailure::Timeout,
            format!("no answer within {:.1}s", server.call_timeout.as_secs_f64()),
        )),
    }
}

fn prompt_text(content: ContentBlock) -> String {
    match content {
        ContentBlock::Text(t) => t.text,
        ContentBlock::Resource(r) => match r.resource {
            ResourceContents::TextResourceContents { text, .. } => text,
            other => serde_json::to_string(&other).unwrap_or_default(),
        },
        other => serde_json::to_string(&other).unwrap_or_default(),
    }
}

/// The failures of a listing over `count` servers: for one named server, or when every server
/// failed, the first failure as the `Err`; otherwise the failures, for the listing to report.
fn partial(server: Option<&str>, count: usize, mut failed: Vec<McpError>) -> Result<Vec<McpError>, McpError> {
    if !failed.is_empty() && (server.is_some() || failed.len() == count) {
        return Err(failed.swap_remove(0));
    }
    Ok(failed)
}

/// One server's resources and resource templates, each tagged with the server and redacted.
async fn resources_of(connection: &ServerConnection) -> Result<(Vec<Value>, Vec<Value>), McpError> {
    let peer = &connection.peer;
    let resources_listing = all_pages(&connection.name, "resources/list", |params| async move {
        peer.list_resources(params).await.map(|r| (r.resources, r.next_cursor))
    });
    let listed = ask(connection, "resources/list", resources_listing).await?;
    // Templates are optional: a server that implements only `resources/list` (the low-level
    // SDKs register no handler it was not given) answers "method not found".
    let templates_or_none = async {
        let listing = all_pages(&connection.name, "resources/templates/list", |params| async move {
            peer.list_resource_templates(params)
                .await
                .map(|r| (r.resource_templates, r.next_cursor))
        });
        match listing.await {
            Err(ServiceError::McpError(data)) if data.code == ErrorCode::METHOD_NOT_FOUND => Ok(Vec::new()),
            other => other,
        }
    };
    let listed_templates = ask(connection, "resources/templates/list", templates_or_none).await?;
    let tag = |item: Value| match item {
        Value::Object(mut map) => {
            map.insert("server".into(), Value::String(connection.name.clone()));
            let mut item = Value::Object(map);
            redact_value(&mut item, &connection.with_tokens(&connection.credentials));
            item
        }
        other => other,
    };
    let resources = listed
        .iter()
        .filter_map(|r| serde_json::to_value(r).ok())
        .map(tag)
        .collect();
    let templates = listed_templates
        .iter()
        .filter_map(|t| serde_json::to_value(t).ok())
        .map(tag)
        .collect();
    Ok((resources, templates))
}

/// One server's prompts.
async fn prompts_of(connection: &ServerConnection) -> Result<Vec<McpPromptInfo>, McpError> {
    let peer = &connection.peer;
    let listing = all_pages(&connection.name, "prompts/list", |params| async move {
        peer.list_prompts(params).await.map(|r| (r.prompts, r.next_cursor))
    });
    let prompts = ask(connection, "prompts/list", listing).await?;
    Ok(prompts
        .into_iter()
        .map(|p| McpPromptInfo {
            server: connection.name.clone(),
            name: p.name,
            title: p.title,
            description: p.description,
            arguments: p
                .arguments
                .unwrap_or_default()
                .into_iter()
                .map(|a| McpPromptArgument {
                    name: a.name,
                    description: a.description,
                    required: a.required.unwrap_or(false),
                })
                .collect(),
        })
        .collect())
}

impl McpSession {
    fn connection(&self, server: &str, request: &str) -> Result<&Arc<ServerConnection>, McpError> {
        match self.by_name.get(server) {
            Some(&i) => Ok(&self.servers[i]),
            None => Err(McpError::Request(McpRequestError {
                server: server.to_owned(),
                request: request.to_owned(),
                failure: RequestFailure::UnknownServer,
                message: format!(
                    "no MCP server named {server:?} is open in this run (open: {})",
                    self.server_names().join(", ")
                ),
            })),
        }
    }

    /// The servers a listing covers: `server`, or every server that declared the capability.
    fn covered(
        &self,
        server: Option<&str>,
        request: &str,
        has: impl Fn(&rmcp::model::ServerCapabilities) -> bool,
    ) -> Result<Vec<&Arc<ServerConnection>>, McpError> {
        let offers = |s: &ServerConnection| s.peer.peer_info().is_some_and(|info| has(&info.capabilities));
        match server {
            Some(name) => {
                let connection = self.connection(name, request)?;
                if offers(connection) {
                    Ok(vec![connection])
                } else {
                    Err(request_error(
                        connection,
                        request,
                        RequestFailure::Unsupported,
                        format!("the server {name} does not offer this"),
                    ))
                }
            }
            None => Ok(self.servers.iter().filter(|s| offers(s)).collect()),
        }
    }

    /// The resources and resource templates of `server` (`None`: every server that offers
    /// resources): `{resources: [{server, uri, name, description?, mimeType?, ...}],
    /// resource_templates: [{server, uriTemplate, name, ...}]}`, as the servers describe them.
    /// A server that does not implement `resources/templates/list` (it answers "method not
    /// found") has no templates.
    ///
    /// Across servers (`None`), every server is asked at once (the entries stay in the
    /// servers' order), and a server whose listing fails does not fail the others': the
    /// value lists what the others listed and gains `failed: [{server, error}]` naming each
    /// failing server (the key is absent when none failed); only when every server failed is
    /// the first failure the `Err`.
    pub async fn list_resources(&self, server: Option<&str>) -> Result<Value, McpError> {
        let mut resources = Vec::new();
        let mut templates = Vec::new();
        let mut failed = Vec::new();
        let covered = self.covered(server, "resources/list", |c| c.resources.is_some())?;
        let count = covered.len();
        // Every server at once (a hung one costs its timeout once, not before the others are
        // asked); the answers in the servers' order.
        for listing in join_all(covered.into_iter().map(|c| resources_of(c))).await {
            match listing {
                Ok((listed, listed_templates)) => {
                    resources.extend(listed);
                    templates.extend(listed_templates);
                }
                Err(e) => failed.push(e),
            }
        }
        let failed = partial(server, count, failed)?;
        let mut out = json!({ "resources": resources, "resource_templates": templates });
        if !failed.is_empty() {
            let failed: Vec<Value> = failed
                .iter()
                .map(|e| json!({"server": e.server(), "error": e.to_string()}))
                .collect();
            out["failed"] = Value::Array(failed);
        }
        Ok(out)
    }

    /// Reads a resource of `server` by URI (a listed resource, or a template's URI filled in):
    /// `{contents: [{uri, mimeType?, text} | {uri, mimeType?, blob}]}` (blobs in base64),
    /// cut to the server's result cap like a tool result.
    pub async fn read_resource(&self, server: &str, uri: &str) -> Result<Value, McpError> {
        let (value, max) = self.read_resource_uncut(server, uri).await?;
        Ok(cap_result(value, max))
    }

    /// [`McpSession::read_resource`] redacted but not cut, and the server's result cap (for
    /// [`crate::McpResourceContext`], which cuts each text content and leaves blobs out).
    pub(crate) async fn read_resource_uncut(&self, server: &str, uri: &str) -> Result<(Value, usize), McpError> {
        let connection = self.connection(server, "resources/read")?;
        let result = ask(
            connection,
            "resources/read",
            connection.peer.read_resource(ReadResourceRequestParams::new(uri)),
        )
        .await?;
        let mut value = json!({ "contents": result.contents });
        redact_value(&mut value, &connection.with_tokens(&connection.credentials));
        let max = connection.max_result_bytes.unwrap_or(self.default_max_result_bytes);
        Ok((value, max))
    }

    /// The prompts of `server` (`None`: every server that offers prompts).
    ///
    /// Across servers (`None`), every server is asked at once (the prompts stay in the
    /// servers' order), and a server whose listing fails does not fail the others': the
    /// listing holds what the others listed, and each failure in
    /// [`McpPromptListing::failed`]; only when every server failed is the first failure the
    /// `Err`.
    pub async fn list_prompts(&self, server: Option<&str>) -> Result<McpPromptListing, McpError> {
        let mut prompts = Vec::new();
        let mut failed = Vec::new();
        let covered = self.covered(server, "prompts/list", |c| c.prompts.is_some())?;
        let count = covered.len();
        for listing in join_all(covered.into_iter().map(|c| prompts_of(c))).await {
            match listing {
                Ok(listed) => prompts.extend(listed),
                Err(e) => failed.push(e),
            }
        }
        let failed = partial(server, count, failed)?;
        Ok(McpPromptListing { prompts, failed })
    }

    /// Fetches prompt `name` of `server` with `arguments` (MCP prompt arguments are strings:
    /// other JSON values are sent as their JSON text).
    pub async fn get_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<McpPrompt, McpError> {
        let connection = self.connection(server, "prompts/get")?;
        let arguments: Map<String, Value> = arguments
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => (k, Value::String(s)),
                other => (k, Value::String(other.to_string())),
            })
            .collect();
        let mut params = GetPromptRequestParams::new(name);
        if !arguments.is_empty() {
            params = params.with_arguments(arguments);
        }
        let result = ask(connection, "prompts/get", connection.peer.get_prompt_once(params)).await?;
        let rmcp::model::GetPromptResponse::Complete(result) = result else {
            return Err(request_error(
                connection,
                "prompts/get",
                RequestFailure::Transport,
                "the server asked for input the client cannot give".into(),
            ));
        };
        let secrets = connection.with_tokens(&connection.credentials);
        let messages = result
            .messages
            .into_iter()
            .map(|m| {
                let text = redact(&prompt_text(m.content), &secrets);
                match m.role {
                    Role::User => Message::user(text),
                    Role::Assistant => Message::assistant(text),
                }
            })
            .collect();
        Ok(McpPrompt {
            server: connection.name.clone(),
            name: name.to_owned(),
            description: result.description,
            messages,
        })
    }
}

impl McpConnector {
    /// Fetches prompt `name` of the configured server `server` outside any run: opens that one
    /// server, fetches the prompt, closes it. For instruction templates an application builds
    /// an agent with.
    pub async fn get_prompt(
        &self,
        server: &str,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<McpPrompt, McpError> {
        let Some(config) = self.config().servers.iter().find(|s| s.name == server).cloned() else {
            return Err(
                McpServerConfigurationError::new(Some(server), "no configured MCP server has this name").into(),
            );
        };
        let session = self.open_servers(vec![config]).await?;
        let prompt = session.get_prompt(server, name, arguments).await;
        session.close().await;
        prompt
    }
}
