//! [`ArgumentValidator`] at work: compiling a schema and checking arguments against it.

use super::ArgumentValidator;

impl std::fmt::Debug for ArgumentValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgumentValidator").finish_non_exhaustive()
    }
}

impl ArgumentValidator {
    /// Compiles a schema; the error says why it is not a valid schema.
    pub fn new(schema: &serde_json::Value) -> Result<Self, String> {
        jsonschema::validator_for(schema)
            .map(|inner| ArgumentValidator { inner })
            .map_err(|e| e.to_string())
    }

    /// What is wrong with `arguments` (at most 8 problems, each with its JSON pointer); empty
    /// when they fit.
    pub fn problems(&self, arguments: &serde_json::Value) -> Vec<String> {
        if self.inner.is_valid(arguments) {
            return Vec::new();
        }
        self.inner
            .iter_errors(arguments)
            .take(8)
            .map(|e| {
                let path = e.instance_path().to_string();
                if path.is_empty() {
                    e.to_string()
                } else {
                    format!("{path}: {e}")
                }
            })
            .collect()
    }

    /// Whether `arguments` fit, without collecting the problems.
    pub fn is_valid(&self, arguments: &serde_json::Value) -> bool {
        self.inner.is_valid(arguments)
    }

    /// `Ok` when `arguments` fit, else the problems joined with `"; "`.
    pub fn check(&self, arguments: &serde_json::Value) -> Result<(), String> {
        let problems = self.problems(arguments);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("; "))
        }
    }
}
