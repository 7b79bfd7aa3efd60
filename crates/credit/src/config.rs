//! Debate configuration (TOML): roles with stationary prompts, rounds, per-round aggregator
//! prompts, models per role, decoding, final decision, optional consensus early stop, and the
//! optimizer settings.

use serde::{Deserialize, Serialize};

/// Errors reading a debate configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: field {field}: {message}")]
    Invalid {
        path: String,
        field: String,
        message: String,
    },
}

/// Sampling settings for one kind of call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decoding {
    #[serde(default)]
    pub temperature: f32,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
}

fn default_max_tokens() -> u32 {
    96
}

impl Default for Decoding {
    fn default() -> Self {
        Decoding {
            temperature: 0.0,
            max_tokens: default_max_tokens(),
            top_p: None,
        }
    }
}

/// One role (agent) of the debate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleConfig {
    pub name: String,
    /// The stationary role prompt theta_i (system message in every round).
    pub prompt: String,
    /// Model spec for this role; the command's `--model` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Decoding override for this role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoding: Option<Decoding>,
}

/// One round's aggregator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregatorConfig {
    /// The aggregation prompt psi_t (system message of the round-t aggregator).
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// How the final answer y = J(x, S_R) is produced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinalDecision {
    /// The answer rule applied to the last shared state (no extra call).
    #[default]
    State,
    /// One more LLM call reading the last shared state.
    Llm,
}

/// Which roles to rewrite in Phase A.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum RoleSelection {
    /// The K lowest-credit roles.
    BottomK { k: usize },
    /// Every role whose credit is below the threshold.
    Threshold { threshold: f64 },
    /// The K lowest-credit roles among those below the threshold.
    BottomKBelow { k: usize, threshold: f64 },
}

/// Which rounds to rewrite in Phase B.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum RoundSelection {
    /// EMA temporal credit below tau with at least m informative failures (section 5.1).
    Ema,
    /// The K lowest rounds by mean aggregator critic score C_time_t.
    BottomK { k: usize },
}

/// Which prompt blocks the optimizer may change (ablations).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Blocks {
    /// Phase A and Phase B (the full method).
    #[default]
    Both,
    /// Phase A only (structural).
    RolesOnly,
    /// Phase B only (temporal).
    AggregatorsOnly,
}

/// Which rounds AgentTurnEval scores.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CriticRounds {
    /// Every round (section 4.3: C_role_i is the mean of c_{i,t} over rounds).
    #[default]
    All,
    /// Only each role's final-round answer: the protocol the paper evaluates (section 5.1),
    /// also accepted as `critic_rounds = "paper"`.
    #[serde(alias = "paper")]
    Final,
}

/// Optimizer settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizerConfig {
    /// Fusion weight: c = lambda*q + (1-lambda)*p.
    #[serde(default = "half")]
    pub lambda: f64,
    #[serde(default = "default_role_selection")]
    pub role_selection: RoleSelection,
    #[serde(default = "default_round_selection")]
    pub round_selection: RoundSelection,
    /// EMA threshold tau.
    #[serde(default = "half")]
    pub tau: f64,
    /// EMA buffer m: informative failures needed before a round may be rewritten.
    #[serde(default = "default_m")]
    pub buffer_m: usize,
    /// EMA rate beta: alpha <- (1-beta)*alpha + beta*q_agg.
    #[serde(default = "default_beta")]
    pub ema_beta: f64,
    /// Outer BCD iterations at most.
    #[serde(default = "default_iterations")]
    pub iterations: usize,
    /// Stop when optimization-set accuracy has not improved for this many iterations.
    #[serde(default = "default_patience")]
    pub patience: usize,
    /// LLM call budget of the optimizer (rollouts, critics, rewrites); none = iterations only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_calls: Option<u64>,
    /// Token budget of the optimizer (prompt + completion); none = no token limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub blocks: Blocks,
    /// The one-round-at-a-time ablation (section 5.4): Phase B may rewrite only this round's
    /// aggregator (1-based); absent = every round the round selection picks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_round: Option<usize>,
    #[serde(default)]
    pub critic_rounds: CriticRounds,
    /// Roll out again for Phase B with the new role prompts (true) or reuse Phase A's rollouts.
    #[serde(default = "yes")]
    pub rerollout_phase_b: bool,
    /// Return the best-scoring evaluated iterate (scoring the last one with one more rollout);
    /// false returns the last iterate as Algorithm 1 does.
    #[serde(default = "yes")]
    pub select_best: bool,
    /// One repair call when a critic answer breaks the consistency rules.
    #[serde(default = "yes")]
    pub critic_repair: bool,
    /// Example explanations per failure label given to AgentDiagnosis.
    #[serde(default = "default_examples")]
    pub examples_per_label: usize,
    /// Token budget (the optimizer model's count) of the failure records the aggregator rewrite
    /// sees: the agents' messages and the wrong state in full while they fit, each cut evenly
    /// beyond it.
    #[serde(default = "default_agg_rewrite_tokens")]
    pub aggregator_rewrite_tokens: usize,
    /// Decoding of critics (AgentTurnEval, peer judge, aggregator critic).
    #[serde(default = "critic_decoding")]
    pub critic_decoding: Decoding,
    /// Decoding of diagnosis and prompt rewrites (and the black-box proposer).
    #[serde(default = "rewrite_decoding")]
    pub rewrite_decoding: Decoding,
    /// Model spec for critics and rewrites; the command's `--model` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

fn half() -> f64 {
    0.5
}
fn yes() -> bool {
    true
}
fn default_m() -> usize {
    3
}
fn default_beta() -> f64 {
    0.3
}
fn default_iterations() -> usize {
    3
}
fn default_patience() -> usize {
    2
}
fn default_examples() -> usize {
    2
}
fn default_agg_rewrite_tokens() -> usize {
    3000
}
fn default_role_selection() -> RoleSelection {
    RoleSelection::BottomK { k: 2 }
}
fn default_round_selection() -> RoundSelection {
    RoundSelection::Ema
}
fn critic_decoding() -> Decoding {
    Decoding {
        temperature: 0.0,
        max_tokens: 128,
        top_p: None,
    }
}
fn rewrite_decoding() -> Decoding {
    Decoding {
        temperature: 0.0,
        max_tokens: 256,
        top_p: None,
    }
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            lambda: half(),
            role_selection: default_role_selection(),
            round_selection: default_round_selection(),
            tau: half(),
            buffer_m: default_m(),
            ema_beta: default_beta(),
            iterations: default_iterations(),
            patience: default_patience(),
            max_calls: None,
            max_tokens: None,
            blocks: Blocks::Both,
            only_round: None,
            critic_rounds: CriticRounds::All,
            rerollout_phase_b: true,
            select_best: true,
            critic_repair: true,
            examples_per_label: default_examples(),
            aggregator_rewrite_tokens: default_agg_rewrite_tokens(),
            critic_decoding: critic_decoding(),
            rewrite_decoding: rewrite_decoding(),
            model: None,
        }
    }
}

/// Dataset and split settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// `mmlu:PATH`, `aqua:PATH`, `jsonl:PATH` (relative paths are relative to the config file).
    pub dataset: String,
    /// Optimization examples (default 100).
    #[serde(default = "default_opt_size")]
    pub optimization_size: usize,
    /// Held-out test examples (all the rest when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_size: Option<usize>,
    /// Seed of the split (fixed across runs).
    #[serde(default)]
    pub split_seed: u64,
}

fn default_opt_size() -> usize {
    100
}

/// The whole debate configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DebateConfig {
    #[serde(default = "default_name")]
    pub name: String,
    /// Number of rounds R.
    pub rounds: usize,
    pub roles: Vec<RoleConfig>,
    /// One aggregator per round; a single entry is copied to every round.
    pub aggregators: Vec<AggregatorConfig>,
    #[serde(default)]
    pub decoding: Decoding,
    #[serde(default)]
    pub final_decision: FinalDecision,
    /// Stop after a round in which every role gave the same valid answer.
    #[serde(default)]
    pub early_stop_consensus: bool,
    /// Questions run at the same time.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    #[serde(default)]
    pub optimizer: OptimizerConfig,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataConfig>,
}

fn default_name() -> String {
    "debate".into()
}
fn default_concurrency() -> usize {
    4
}

impl DebateConfig {
    /// Parse TOML text; `path` is used in error messages.
    pub fn from_toml(text: &str, path: &str) -> Result<Self, ConfigError> {
        let mut cfg: DebateConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: e.to_string(),
        })?;
        cfg.normalize(path)?;
        Ok(cfg)
    }

    /// Read and parse a TOML file.
    pub fn from_path(path: &std::path::Path) -> Result<Self, ConfigError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: p.clone(),
            source,
        })?;
        Self::from_toml(&text, &p)
    }

    /// Validate and expand (a single aggregator is copied to every round).
    pub fn normalize(&mut self, path: &str) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: &str| ConfigError::Invalid {
            path: path.into(),
            field: field.into(),
            message: message.into(),
        };
        if self.rounds == 0 {
            return Err(invalid("rounds", "must be at least 1"));
        }
        if self.roles.is_empty() {
            return Err(invalid("roles", "at least one role is needed"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, r) in self.roles.iter().enumerate() {
            if r.name.trim().is_empty() || r.name == AGGREGATOR_AGENT {
                return Err(invalid(
                    &format!("roles[{i}].name"),
                    "must be non-empty and not \"aggregator\"",
                ));
            }
            if !seen.insert(r.name.clone()) {
                return Err(invalid(&format!("roles[{i}].name"), "duplicate role name"));
            }
        }
        if self.aggregators.len() == 1 && self.rounds > 1 {
            let a = self.aggregators[0].clone();
            self.aggregators = vec![a; self.rounds];
        }
        if self.aggregators.len() != self.rounds {
            return Err(invalid(
                "aggregators",
                &format!(
                    "expected 1 or {} (one per round), found {}",
                    self.rounds,
                    self.aggregators.len()
                ),
            ));
        }
        let o = &self.optimizer;
        if !(0.0..=1.0).contains(&o.lambda) {
            return Err(invalid("optimizer.lambda", "must be in [0, 1]"));
        }
        if !(0.0..=1.0).contains(&o.ema_beta) || o.ema_beta == 0.0 {
            return Err(invalid("optimizer.ema_beta", "must be in (0, 1]"));
        }
        if let Some(r) = o.only_round {
            if r == 0 || r > self.rounds {
                return Err(invalid(
                    "optimizer.only_round",
                    &format!("must be a round from 1 to {}", self.rounds),
                ));
            }
        }
        if self.concurrency == 0 {
            self.concurrency = 1;
        }
        Ok(())
    }

    /// The initial prompt set (theta_i, psi_t).
    pub fn prompts(&self) -> PromptSet {
        PromptSet {
            roles: self.roles.iter().map(|r| r.prompt.clone()).collect(),
            aggregators: self.aggregators.iter().map(|a| a.prompt.clone()).collect(),
        }
    }

    pub fn role_names(&self) -> Vec<String> {
        self.roles.iter().map(|r| r.name.clone()).collect()
    }

    /// Every model spec named in the configuration.
    pub fn model_specs(&self) -> Vec<String> {
        let mut specs: Vec<String> = self
            .roles
            .iter()
            .filter_map(|r| r.model.clone())
            .chain(self.aggregators.iter().filter_map(|a| a.model.clone()))
            .chain(self.optimizer.model.clone())
            .collect();
        specs.sort();
        specs.dedup();
        specs
    }
}

/// Agent name used for aggregation steps in traces.
pub const AGGREGATOR_AGENT: &str = "aggregator";

/// The optimization variables: one stationary prompt per role and one prompt per round's aggregator.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PromptSet {
    pub roles: Vec<String>,
    pub aggregators: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML: &str = r#"
rounds = 2
[[roles]]
name = "solver"
prompt = "Solve it."
[[roles]]
name = "critic"
prompt = "Check it."
model = "openai:gpt-4o-mini"
[[aggregators]]
prompt = "Summarize."
[optimizer]
role_selection = { kind = "bottom_k", k = 1 }
"#;

    #[test]
    fn parses_and_expands_single_aggregator() {
        let cfg = DebateConfig::from_toml(TOML, "x.toml").unwrap();
        assert_eq!(cfg.aggregators.len(), 2);
        assert_eq!(
            cfg.optimizer.role_selection,
            RoleSelection::BottomK { k: 1 }
        );
        assert_eq!(cfg.model_specs(), vec!["openai:gpt-4o-mini".to_string()]);
        assert_eq!(
            cfg.prompts().roles,
            vec!["Solve it.".to_string(), "Check it.".into()]
        );
    }

    /// Issue 17 item 2: the paper's evaluated protocol by name.
    #[test]
    fn the_papers_critic_protocol_by_name() {
        let toml = TOML.replace("[optimizer]\n", "[optimizer]\ncritic_rounds = \"paper\"\n");
        let cfg = DebateConfig::from_toml(&toml, "x.toml").unwrap();
        assert_eq!(cfg.optimizer.critic_rounds, CriticRounds::Final);
        assert_eq!(cfg.optimizer.aggregator_rewrite_tokens, 3000);
    }

    #[test]
    fn rejects_bad_configs_with_field_names() {
        let err = DebateConfig::from_toml(&TOML.replace("rounds = 2", "rounds = 0"), "x.toml")
            .unwrap_err();
        assert!(err.to_string().contains("rounds"), "{err}");
        let err = DebateConfig::from_toml(&TOML.replace("\"critic\"", "\"solver\""), "x.toml")
            .unwrap_err();
        assert!(err.to_string().contains("roles[1].name"), "{err}");
        let err = DebateConfig::from_toml("rounds = \"x\"", "x.toml").unwrap_err();
        assert!(err.to_string().contains("x.toml"), "{err}");
    }
}
