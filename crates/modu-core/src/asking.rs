//! [`RunContext::ask_user`]: a tool's ask for input as a `Result` to propagate with `?`
//! (apart from `context`, so that the context does not depend on tool errors).

use crate::context::RunContext;

impl<C> RunContext<C> {
    /// Asks a person for a value fitting `schema` (see [`crate::input`]): returns the answer
    /// on the call's execution after a person answered; before that, an error to propagate
    /// with `?` while the run pauses. A declined ask is a `rejected` tool error the model sees.
    pub fn ask_user(
        &self,
        prompt: impl Into<String>,
        schema: serde_json::Value,
    ) -> Result<serde_json::Value, crate::ToolError> {
        use crate::tool::{ToolError, ToolErrorKind};
        if self.call_id().is_none() {
            return Err(ToolError::execution("input_outside_call")
                .with_message("a person can be asked for input only from a tool call"));
        }
        match self.request_input(crate::input::InputSpec::new(prompt, schema)) {
            Some(crate::input::InputAnswer::Given { value }) => Ok(value),
            Some(crate::input::InputAnswer::Declined { message }) => {
                Err(ToolError::new(ToolErrorKind::Rejected, "input_declined")
                    .with_message(message.unwrap_or_else(|| "the person declined to answer".to_owned())))
            }
            None => Err(ToolError::new(ToolErrorKind::InputRequired, "input_required")
                .with_message("waiting for a person's input; the run pauses")),
        }
    }

    /// [`RunContext::ask_user`] with the schema of `T` and the answer decoded as `T`.
    pub fn ask_user_as<T>(&self, prompt: impl Into<String>) -> Result<T, crate::ToolError>
    where
        T: schemars::JsonSchema + serde::de::DeserializeOwned,
    {
        let schema = serde_json::to_value(schemars::schema_for!(T))
            .map_err(|e| crate::ToolError::execution("input_schema").with_message(e.to_string()))?;
        let value = self.ask_user(prompt, schema)?;
        serde_json::from_value(value).map_err(|e| {
            crate::ToolError::validation("input_invalid", format!("the person's answer does not decode: {e}"))
        })
    }
}
