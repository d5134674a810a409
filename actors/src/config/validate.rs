//! `RuntimeConfig::validate`: values that would make the runtime misbehave, refused at start
//! with the key that holds them. One function per group of sections.
use super::RuntimeConfig;

/// A refusal: the key and why.
type Refusal = (String, String);

fn bad(k: &str, why: &str) -> Result<(), Refusal> {
    Err((k.to_owned(), why.to_owned()))
}

impl RuntimeConfig {
    /// Checks values that would make the runtime misbehave; the error names the key.
    pub fn validate(&self) -> Result<(), Refusal> {
        self.loop_bounds()?;
        self.work_and_platforms()?;
        self.mcp_servers()?;
        self.schedules_and_providers()?;
        Ok(())
    }

    /// The lease, the loop, compression, resumes and the tool workers.
    fn loop_bounds(&self) -> Result<(), Refusal> {
        if self.lease.ttl_s == 0 {
            return bad("lease.ttl_s", "must be greater than 0");
        }
        if self.lease.refresh_s == 0 || self.lease.refresh_s >= self.lease.ttl_s {
            return bad(
                "lease.refresh_s",
                "must be greater than 0 and less than lease.ttl_s",
            );
        }
        if self.agent.max_iterations == 0 {
            return bad("agent.max_iterations", "must be greater than 0");
        }
        if self.agent.iteration_budget == 0 {
            return bad("agent.iteration_budget", "must be greater than 0");
        }
        if !(0.0..=1.0).contains(&self.compression.threshold) || self.compression.threshold == 0.0 {
            return bad("compression.threshold", "must be in (0, 1]");
        }
        if !(0.0..1.0).contains(&self.compression.target_ratio) {
            return bad("compression.target_ratio", "must be in [0, 1)");
        }
        for (model, m) in &self.compression.models {
            let key = |field: &str| format!("compression.models.{model:?}.{field}");
            if m.threshold.is_some_and(|t| !(t > 0.0 && t <= 1.0)) {
                return bad(&key("threshold"), "must be in (0, 1]");
            }
            if m.target_ratio.is_some_and(|r| !(0.0..1.0).contains(&r)) {
                return bad(&key("target_ratio"), "must be in [0, 1)");
            }
        }
        if self.compression.timeout_s == 0 {
            return bad("compression.timeout_s", "must be greater than 0");
        }
        if self.agent.max_resumes > 100 {
            return bad("agent.max_resumes", "must be 100 or less");
        }
        if self.agent.repeat_guard < 2 {
            return bad("agent.repeat_guard", "must be 2 or more");
        }
        if self.tools.max_workers == 0 {
            return bad("tools.max_workers", "must be greater than 0");
        }
        Ok(())
    }

    /// Memory, the audit log, delegation, background logs, skills, the platforms and prices.
    fn work_and_platforms(&self) -> Result<(), Refusal> {
        let review = &self.memory.review_provider;
        if !review.is_empty() && !self.providers.iter().any(|p| &p.name == review) {
            return bad(
                "memory.review_provider",
                "must name one of the [[providers]] (or be empty: the auxiliary, else the primary)",
            );
        }
        if self.security.audit_retention_days == 0 {
            return bad("security.audit_retention_days", "must be greater than 0");
        }
        if self.delegation.max_children == 0 {
            return bad("delegation.max_children", "must be greater than 0");
        }
        if self.delegation.child_max_iterations == 0 {
            return bad("delegation.child_max_iterations", "must be greater than 0");
        }
        if self.tools.background_log_bytes < 4096 {
            return bad("tools.background_log_bytes", "must be at least 4096");
        }
        if self.skills.enabled && self.skills.index_chars == 0 {
            return bad("skills.index_chars", "must be greater than 0");
        }
        self.platforms.validate()?;
        for (model, price) in &self.pricing {
            if let Some(field) = price.invalid_field() {
                return bad(
                    &format!("pricing.{model:?}.{field}"),
                    "must be a number >= 0 (USD per million tokens)",
                );
            }
        }
        Ok(())
    }

    /// Each `[[tools.mcp]]` entry, and that no two share a name.
    fn mcp_servers(&self) -> Result<(), Refusal> {
        for (i, server) in self.tools.mcp.iter().enumerate() {
            if let Some((field, why)) = server.invalid_field() {
                return bad(&format!("tools.mcp[{i}].{field}"), &why);
            }
            if self.tools.mcp[..i].iter().any(|s| s.name == server.name) {
                return bad(
                    &format!("tools.mcp[{i}].name"),
                    &format!("{:?} is the name of another MCP server", server.name),
                );
            }
        }
        Ok(())
    }

    /// `[[schedules]]` and each `[[providers]]` entry.
    fn schedules_and_providers(&self) -> Result<(), Refusal> {
        crate::schedule::check_config(&self.schedules)?;
        for (i, p) in self.providers.iter().enumerate() {
            if p.base_url.is_empty() {
                return bad(&format!("providers[{i}].base_url"), "must not be empty");
            }
            if p.model.is_empty() {
                return bad(&format!("providers[{i}].model"), "must not be empty");
            }
            // An answer must leave room for the request in the window.
            if p.max_output_tokens
                .is_some_and(|m| m == 0 || m >= p.context_window)
            {
                return bad(
                    &format!("providers[{i}].max_output_tokens"),
                    &format!(
                        "must be at least 1 and less than context_window ({})",
                        p.context_window
                    ),
                );
            }
        }
        Ok(())
    }
}
