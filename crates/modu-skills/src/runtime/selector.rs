//! Choosing skills for a request: [`SkillSelector`] and the model-backed
//! [`ModelSkillSelector`].

use std::sync::Arc;

use async_trait::async_trait;
use modu_core::{ChatModel, ChatRequest, Message, ResponseFormat, Usage};
use serde_json::{Value, json};

use crate::error::SkillError;

/// What a selector sees of a skill: its name and description, nothing else.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SkillCandidate {
    /// The skill's name.
    pub name: String,
    /// The skill's description.
    pub description: String,
}

/// A selector's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SkillSelection {
    /// The chosen skill names.
    pub skills: Vec<String>,
    /// What choosing cost (added to the run's usage).
    pub usage: Usage,
}

/// Chooses skills for a request (`skill_mode: auto` and `hybrid`).
#[async_trait]
pub trait SkillSelector: Send + Sync {
    /// The most skills one run gets from this selector (pinned ones included, in hybrid mode).
    fn max_skills(&self) -> usize;

    /// Chooses at most `limit` of `candidates` for `request`.
    async fn select(
        &self,
        request: &str,
        candidates: &[SkillCandidate],
        limit: usize,
    ) -> Result<SkillSelection, SkillError>;
}

/// Selects skills with a separate model call: structured output (a JSON schema whose names are
/// an enum of the candidates), **no tools**, and only names and descriptions in the prompt. It
/// never disturbs the run's own tool calling or output format.
#[derive(Clone)]
pub struct ModelSkillSelector {
    /// The model asked (it may be the agent's own).
    pub model: Arc<dyn ChatModel>,
    /// The most skills per run.
    pub max_skills: usize,
}

impl ModelSkillSelector {
    /// A selector asking `model` for at most `max_skills` skills.
    pub fn new(model: Arc<dyn ChatModel>, max_skills: usize) -> Self {
        ModelSkillSelector { model, max_skills }
    }

    /// The request sent to the model (public so it can be inspected and tested).
    pub fn request(request: &str, candidates: &[SkillCandidate], limit: usize) -> ChatRequest {
        let names: Vec<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
        let listing = serde_json::to_string_pretty(candidates).unwrap_or_default();
        let system = format!(
            "You choose which skills help with a user's request. A skill is a documented procedure; \
             choose a skill only when its description fits the request. Choose at most {limit}, \
             most relevant first, or none. Answer only with JSON: {{\"skills\": [names]}}."
        );
        let user = format!("Request:\n{request}\n\nAvailable skills:\n{listing}");
        let schema = json!({
            "type": "object",
            "properties": {
                "skills": {
                    "type": "array",
                    "items": {"type": "string", "enum": names},
                    "description": format!("At most {limit} skill names, most relevant first."),
                }
            },
            "required": ["skills"],
            "additionalProperties": false,
        });
        let mut req = ChatRequest::new(vec![Message::system(system), Message::user(user)])
            .with_response_format(ResponseFormat::new("skill_selection", schema));
        req.temperature = Some(0.0);
        req
    }
}

impl std::fmt::Debug for ModelSkillSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelSkillSelector")
            .field("model", &self.model.model_name())
            .field("max_skills", &self.max_skills)
            .finish()
    }
}

#[async_trait]
impl SkillSelector for ModelSkillSelector {
    fn max_skills(&self) -> usize {
        self.max_skills
    }

    async fn select(
        &self,
        request: &str,
        candidates: &[SkillCandidate],
        limit: usize,
    ) -> Result<SkillSelection, SkillError> {
        if limit == 0 || candidates.is_empty() {
            return Ok(SkillSelection::default());
        }
        let req = Self::request(request, candidates, limit);
        let response = self.model.complete(req).await.map_err(|e| SkillError::Selection {
            message: format!("the selector model call failed ({}): {e}", e.kind()),
        })?;
        let text = response.message.text();
        let trimmed = strip_fences(&text);
        let value: Value = serde_json::from_str(trimmed).map_err(|e| SkillError::Selection {
            message: format!("the selector's answer is not JSON: {e}"),
        })?;
        let names = value
            .get("skills")
            .and_then(Value::as_array)
            .ok_or_else(|| SkillError::Selection {
                message: "the selector's answer has no \"skills\" list".into(),
            })?;
        let mut chosen: Vec<String> = Vec::new();
        for name in names.iter().filter_map(Value::as_str) {
            // Names outside the candidates are ignored (the schema forbids them anyway).
            if candidates.iter().any(|c| c.name == name) && !chosen.iter().any(|c| c == name) {
                chosen.push(name.to_owned());
            }
        }
        chosen.truncate(limit);
        Ok(SkillSelection {
            skills: chosen,
            usage: response.usage,
        })
    }
}

fn strip_fences(text: &str) -> &str {
    let t = text.trim();
    let t = t
        .strip_prefix("```json")
        .or_else(|| t.strip_prefix("```"))
        .map(|rest| rest.trim_end().trim_end_matches("```"))
        .unwrap_or(t);
    t.trim()
}
