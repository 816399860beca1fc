//! What an agent is configured with, as plain data: retries, run limits, when the final answer
//! gets a request of its own, and the sampling settings.

use std::time::Duration;

use crate::model::ToolChoice;
use serde::{Deserialize, Serialize};

/// Retries of model calls (on transient errors) and of idempotent tools (on retryable errors).
///
/// A retry is made only when its wait ends before the run's deadline
/// ([`RunLimits::timeout`](crate::agent::RunLimits::timeout)): when a server's `retry_after` or
/// the backoff is longer than the time the run has left, the error stands at once (a model's
/// ends the run with [`AgentError::Model`](crate::error::AgentError::Model), retryable, so the
/// run can be resumed later) instead of the run waiting out its timeout.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RetryConfig {
    /// Attempts in all, the first included (1 = no retry).
    pub max_attempts: u32,
    /// The wait before the first retry.
    pub initial_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
    /// Each wait is the previous one times this.
    pub multiplier: f64,
    /// The fraction of each backoff wait that is random (0: exact waits; default 0.2, so a
    /// wait is 80–100% of the backoff), so that clients that failed together do not retry
    /// together. A server's `retry_after` is waited exactly.
    #[serde(default = "default_jitter")]
    pub jitter: f64,
}

fn default_jitter() -> f64 {
    0.2
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(10),
            multiplier: 2.0,
            jitter: default_jitter(),
        }
    }
}

impl RetryConfig {
    /// `max_attempts` attempts with the default backoff.
    pub fn new(max_attempts: u32) -> Self {
        RetryConfig {
            max_attempts: max_attempts.max(1),
            ..RetryConfig::default()
        }
    }

    /// No retries.
    pub fn none() -> Self {
        Self::new(1)
    }

    /// Sets the backoff: first wait and longest wait.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// Sets the random fraction of each backoff wait (clamped to 0..=1).
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// The wait after failed attempt number `attempt` (from 1): the [backoff](Self::backoff)
    /// less a random part of up to `jitter` of it.
    pub fn wait(&self, attempt: u32) -> Duration {
        let wait = self.backoff(attempt);
        let jitter = if self.jitter.is_finite() {
            self.jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        if jitter == 0.0 {
            return wait;
        }
        // A random u64 from std's per-instance hasher keys: no RNG dependency for one number.
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let unit = (random >> 11) as f64 / (1u64 << 53) as f64;
        wait.mul_f64(1.0 - jitter * unit)
    }

    /// The wait after failed attempt number `attempt` (from 1), before jitter.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = self.multiplier.max(1.0).powi(attempt.saturating_sub(1).min(30) as i32);
        let secs = self.initial_backoff.as_secs_f64() * factor;
        Duration::try_from_secs_f64(secs)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }
}

/// Limits of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunLimits {
    /// Model requests of the tool loop, at most, as the OpenAI Agents SDK counts turns: after
    /// the `max_turns`-th answer that calls tools (and its tools), the run fails with
    /// `MaxTurnsExceeded` instead of asking the model again. An answer within the limit that
    /// calls no tool ends the loop as usual; a separate finalization request is not counted.
    pub max_turns: u32,
    /// Tool calls in the whole run, at most.
    pub max_tool_calls: u32,
    /// One timeout shared by every model call, tool call, guardrail check, context provider
    /// call (`invoking`, `invoked`) and store operation of the run.
    pub timeout: Option<Duration>,
    /// Plan-and-Execute: steps in a plan (plan steps, not model calls), at most.
    pub max_steps: u32,
    /// Plan-and-Execute: step-result attempts per step (invalid or `failed` step results).
    pub max_step_attempts: u32,
    /// Plan-and-Execute: plan revisions after tool failures.
    pub max_replans: u32,
    /// Plan-and-Execute: corrected-argument repair calls per step.
    pub max_tool_repair_attempts: u32,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_turns: 16,
            max_tool_calls: 64,
            timeout: Some(Duration::from_secs(300)),
            max_steps: 8,
            max_step_attempts: 2,
            max_replans: 1,
            max_tool_repair_attempts: 1,
        }
    }
}

impl RunLimits {
    /// Sets `max_turns`.
    pub fn max_turns(mut self, n: u32) -> Self {
        self.max_turns = n;
        self
    }
    /// Sets `max_tool_calls`.
    pub fn max_tool_calls(mut self, n: u32) -> Self {
        self.max_tool_calls = n;
        self
    }
    /// Sets the shared timeout: a [`Duration`], or `None` for no timeout (`Some(duration)` is
    /// taken too).
    ///
    /// ```
    /// use std::time::Duration;
    /// use modu_agent::RunLimits;
    ///
    /// let limits = RunLimits::default().timeout(Duration::from_secs(30));
    /// assert_eq!(limits.timeout, Some(Duration::from_secs(30)));
    /// assert_eq!(limits.timeout(None).timeout, None);
    /// ```
    pub fn timeout(mut self, t: impl Into<Option<Duration>>) -> Self {
        self.timeout = t.into();
        self
    }
    /// Sets `max_steps` (Plan-and-Execute).
    pub fn max_steps(mut self, n: u32) -> Self {
        self.max_steps = n;
        self
    }
    /// Sets `max_step_attempts` (Plan-and-Execute).
    pub fn max_step_attempts(mut self, n: u32) -> Self {
        self.max_step_attempts = n;
        self
    }
    /// Sets `max_replans` (Plan-and-Execute).
    pub fn max_replans(mut self, n: u32) -> Self {
        self.max_replans = n;
        self
    }
    /// Sets `max_tool_repair_attempts` (Plan-and-Execute).
    pub fn max_tool_repair_attempts(mut self, n: u32) -> Self {
        self.max_tool_repair_attempts = n;
        self
    }
}

/// When the final answer gets a request of its own, without tools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinalizationMode {
    /// Only when the agent has tools and structured output: tool requests carry tool schemas
    /// only, and a separate request carries the output schema only (the default).
    #[default]
    StructuredOnly,
    /// Always a separate final request, for text and structured output alike.
    Always,
    /// Never: the last answer of the tool loop is the final answer. With tools and structured
    /// output the model never sees the schema, so say it in the instructions.
    Disabled,
}

/// Sampling settings sent with every request of the agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelSettings {
    /// Temperature.
    pub temperature: Option<f32>,
    /// Nucleus sampling: only the tokens of this much probability mass are considered.
    pub top_p: Option<f32>,
    /// Penalises tokens by how often they already appear (OpenAI's −2.0 to 2.0; Ollama's
    /// `frequency_penalty` option).
    pub frequency_penalty: Option<f32>,
    /// Penalises tokens that already appear at all (OpenAI's −2.0 to 2.0; Ollama's
    /// `presence_penalty` option).
    pub presence_penalty: Option<f32>,
    /// Most tokens per answer.
    pub max_tokens: Option<u32>,
    /// Seed.
    pub seed: Option<u64>,
    /// Stop sequences.
    pub stop: Vec<String>,
    /// Let the model call several tools at once.
    pub parallel_tool_calls: Option<bool>,
    /// How hard a reasoning model should think (`None`: the server's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<crate::model::ReasoningEffort>,
    /// Whether and which tool the model must call (`None`: the server's default, `auto`).
    /// Sent only with requests that offer tools; a [`ToolChoice::Named`] tool that the
    /// request does not offer is not sent. After the model's first tool call in a run, later
    /// requests of the run go back to the server's default unless
    /// [`ModelSettings::keep_tool_choice`] is set, so `required` cannot loop forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Keep sending [`ModelSettings::tool_choice`] after the model has called a tool
    /// (default `false`: reset to the server's default after the first tool call of a run,
    /// as the OpenAI Agents SDK does).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_tool_choice: bool,
}

impl ModelSettings {
    /// Settings that leave everything to the server's defaults.
    ///
    /// ```
    /// use modu_agent::ModelSettings;
    /// use modu_core::{ReasoningEffort, ToolChoice};
    ///
    /// let settings = ModelSettings::new()
    ///     .temperature(0.2)
    ///     .top_p(0.9)
    ///     .max_tokens(512)
    ///     .seed(7)
    ///     .stop(["END"])
    ///     .parallel_tool_calls(false)
    ///     .reasoning_effort(ReasoningEffort::Low)
    ///     .tool_choice(ToolChoice::Required);
    /// assert_eq!(settings.tool_choice, Some(ToolChoice::Required));
    /// assert!(!settings.keep_tool_choice);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the temperature.
    pub fn temperature(mut self, t: f32) -> Self {
        self.temperature = Some(t);
        self
    }
    /// Sets nucleus sampling's probability mass.
    pub fn top_p(mut self, p: f32) -> Self {
        self.top_p = Some(p);
        self
    }
    /// Sets the frequency penalty.
    pub fn frequency_penalty(mut self, penalty: f32) -> Self {
        self.frequency_penalty = Some(penalty);
        self
    }
    /// Sets the presence penalty.
    pub fn presence_penalty(mut self, penalty: f32) -> Self {
        self.presence_penalty = Some(penalty);
        self
    }
    /// Sets the most tokens per answer.
    pub fn max_tokens(mut self, n: u32) -> Self {
        self.max_tokens = Some(n);
        self
    }
    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
    /// Sets the stop sequences (replacing any set before).
    pub fn stop<S: Into<String>>(mut self, stop: impl IntoIterator<Item = S>) -> Self {
        self.stop = stop.into_iter().map(Into::into).collect();
        self
    }
    /// Lets the model call several tools at once, or not.
    pub fn parallel_tool_calls(mut self, allow: bool) -> Self {
        self.parallel_tool_calls = Some(allow);
        self
    }
    /// Sets how hard a reasoning model should think.
    pub fn reasoning_effort(mut self, effort: crate::model::ReasoningEffort) -> Self {
        self.reasoning_effort = Some(effort);
        self
    }
    /// Sets whether and which tool the model must call ([`ModelSettings::tool_choice`]).
    pub fn tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }
    /// Keeps the tool choice after the model's first tool call
    /// ([`ModelSettings::keep_tool_choice`]).
    pub fn keep_tool_choice(mut self, keep: bool) -> Self {
        self.keep_tool_choice = keep;
        self
    }

    /// These settings over `base`: every field set here wins, the rest comes from `base`
    /// (a run's own settings over its agent's, [`crate::AgentRequest::model_settings`]).
    pub fn over(&self, base: &ModelSettings) -> ModelSettings {
        ModelSettings {
            temperature: self.temperature.or(base.temperature),
            top_p: self.top_p.or(base.top_p),
            frequency_penalty: self.frequency_penalty.or(base.frequency_penalty),
            presence_penalty: self.presence_penalty.or(base.presence_penalty),
            max_tokens: self.max_tokens.or(base.max_tokens),
            seed: self.seed.or(base.seed),
            stop: if self.stop.is_empty() {
                base.stop.clone()
            } else {
                self.stop.clone()
            },
            parallel_tool_calls: self.parallel_tool_calls.or(base.parallel_tool_calls),
            reasoning_effort: self.reasoning_effort.or(base.reasoning_effort),
            tool_choice: self.tool_choice.clone().or_else(|| base.tool_choice.clone()),
            keep_tool_choice: self.keep_tool_choice || base.keep_tool_choice,
        }
    }
}

/// How many orphaned runs one [`Agent::recover_orphans`](crate::Agent::recover_orphans) call
/// continues at a time.
pub const RECOVER_CONCURRENCY: usize = 16;
