//! `maslens optimize` as the CLI and any other front end start it: option overrides of the
//! `[optimizer]` table, the dataset spec and split (option, else `[data]`, else default), the
//! sweep of settings ([`optimize_settings`]: one [`run_experiment`] each, on the same split and
//! models), and the output folder (`report.json`, `report.md`, `report.html`, `prompts.json`,
//! `traces/<method>-seed<S>.jsonl`). The experiment itself (verbalized block coordinate descent
//! against the unoptimized prompts and the black box) is `maslens_credit::experiment`.

use crate::CoreError;
use maslens_credit::config::{Blocks, DataConfig, DebateConfig, RoleSelection};
use maslens_credit::data::{load_spec, Loaded, Mcq, Split};
use maslens_credit::debate::{to_trace, ModelSet};
use maslens_credit::experiment::{run_experiment, Experiment, ExperimentOptions};
use maslens_credit::CreditError;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// Values that replace those of the configuration's `[optimizer]` table (`None`: keep).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub iterations: Option<usize>,
    pub blocks: Option<Blocks>,
    /// Rewrite the K lowest-credit roles.
    pub bottom_k: Option<usize>,
    pub lambda: Option<f64>,
    pub tau: Option<f64>,
    pub buffer_m: Option<usize>,
    pub max_calls: Option<u64>,
    pub max_tokens: Option<u64>,
    /// The one-round-at-a-time ablation: Phase B rewrites only this round (1-based).
    pub only_round: Option<usize>,
}

impl Overrides {
    /// Apply to `cfg`; a `lambda` outside [0, 1] is an error.
    pub fn apply(&self, cfg: &mut DebateConfig) -> Result<(), CreditError> {
        let o = &mut cfg.optimizer;
        if let Some(l) = self.lambda {
            if !(0.0..=1.0).contains(&l) {
                return Err(CreditError::Other("--lambda must be in [0, 1]".into()));
            }
            o.lambda = l;
        }
        o.iterations = self.iterations.unwrap_or(o.iterations);
        o.blocks = self.blocks.unwrap_or(o.blocks);
        if let Some(k) = self.bottom_k {
            o.role_selection = RoleSelection::BottomK { k };
        }
        o.tau = self.tau.unwrap_or(o.tau);
        o.buffer_m = self.buffer_m.unwrap_or(o.buffer_m);
        o.max_calls = self.max_calls.or(o.max_calls);
        o.max_tokens = self.max_tokens.or(o.max_tokens);
        o.only_round = self.only_round.or(o.only_round);
        if let Some(r) = o.only_round {
            if r == 0 || r > cfg.rounds {
                return Err(CreditError::Other(format!(
                    "--only-round {r}: the debate has rounds 1 to {}",
                    cfg.rounds
                )));
            }
        }
        Ok(())
    }
}

/// A setting the `--sweep` grid varies (section 5.4: the tau / m sensitivity study and the
/// one-round-at-a-time ablation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepKey {
    /// EMA threshold tau.
    Tau,
    /// EMA buffer m.
    BufferM,
    /// Phase B rewrites only this round (1-based).
    OnlyRound,
    /// Fusion weight lambda.
    Lambda,
}

impl SweepKey {
    pub fn as_str(self) -> &'static str {
        match self {
            SweepKey::Tau => "tau",
            SweepKey::BufferM => "buffer_m",
            SweepKey::OnlyRound => "only_round",
            SweepKey::Lambda => "lambda",
        }
    }
}

/// One axis of a sweep: `KEY=V1,V2,...` (`tau`, `buffer_m` or `m`, `only_round` or `round`,
/// `lambda`).
#[derive(Debug, Clone, PartialEq)]
pub struct SweepAxis {
    pub key: SweepKey,
    pub values: Vec<f64>,
}

impl std::str::FromStr for SweepAxis {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (k, vs) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?}: expected KEY=V1,V2,... (e.g. tau=0.3,0.5,0.7)"))?;
        let key = match k.trim() {
            "tau" => SweepKey::Tau,
            "buffer_m" | "m" => SweepKey::BufferM,
            "only_round" | "round" => SweepKey::OnlyRound,
            "lambda" => SweepKey::Lambda,
            other => {
                return Err(format!(
                "{other:?}: sweepable settings are tau, buffer_m (m), only_round (round), lambda"
            ))
            }
        };
        let values = vs
            .split(',')
            .map(|v| {
                let x: f64 = v
                    .trim()
                    .parse()
                    .map_err(|_| format!("{k}: {v:?} is not a number"))?;
                let whole = matches!(key, SweepKey::BufferM | SweepKey::OnlyRound);
                if !x.is_finite() || (whole && (x < 0.0 || x.fract() != 0.0)) {
                    return Err(format!("{k}: {v:?} is not a valid value"));
                }
                Ok(x)
            })
            .collect::<Result<Vec<f64>, String>>()?;
        if values.is_empty() {
            return Err(format!("{k}: no values"));
        }
        Ok(SweepAxis { key, values })
    }
}

/// One point of a sweep grid: a value per axis.
pub type Setting = Vec<(SweepKey, f64)>;

/// Every combination of the axes' values (the first axis varies slowest); one empty setting
/// when there are no axes.
pub fn sweep_grid(axes: &[SweepAxis]) -> Vec<Setting> {
    let mut grid: Vec<Setting> = vec![Vec::new()];
    for a in axes {
        grid = grid
            .into_iter()
            .flat_map(|g| {
                a.values.iter().map(move |&v| {
                    let mut g = g.clone();
                    g.push((a.key, v));
                    g
                })
            })
            .collect();
    }
    grid
}

/// `tau=0.3,buffer_m=5` (also the setting's output folder name).
pub fn setting_label(setting: &[(SweepKey, f64)]) -> String {
    setting
        .iter()
        .map(|(k, v)| format!("{}={v}", k.as_str()))
        .collect::<Vec<_>>()
        .join(",")
}

/// Apply a sweep setting to a configuration (the same checks as the overrides).
pub fn apply_setting(
    cfg: &mut DebateConfig,
    setting: &[(SweepKey, f64)],
) -> Result<(), CreditError> {
    let mut o = Overrides::default();
    for &(k, v) in setting {
        match k {
            SweepKey::Tau => o.tau = Some(v),
            SweepKey::BufferM => o.buffer_m = Some(v as usize),
            SweepKey::OnlyRound => o.only_round = Some(v as usize),
            SweepKey::Lambda => o.lambda = Some(v),
        }
    }
    o.apply(cfg)
}

/// One configuration per setting of the grid over `axes` ([`sweep_grid`]), `cfg` with the
/// setting applied, by [`setting_label`] (without axes: `cfg` itself, labelled "").
pub fn sweep_configs(
    cfg: &DebateConfig,
    axes: &[SweepAxis],
) -> Result<Vec<(String, Arc<DebateConfig>)>, CreditError> {
    let mut configs = Vec::new();
    for setting in &sweep_grid(axes) {
        let label = setting_label(setting);
        let mut c = cfg.clone();
        apply_setting(&mut c, setting)
            .map_err(|e| CreditError::Other(format!("--sweep setting {label}: {e}")))?;
        configs.push((label, Arc::new(c)));
    }
    Ok(configs)
}

/// Run one experiment per setting of `configs` ([`sweep_configs`]; one, the configuration's,
/// without a sweep) on the same split and models; `on_setting` hears each setting's label
/// before it runs (empty without a sweep).
pub async fn optimize_settings(
    models: &ModelSet,
    configs: &[(String, Arc<DebateConfig>)],
    split: &Split,
    dataset: &str,
    options: &ExperimentOptions,
    on_setting: &dyn Fn(&str),
) -> Result<Vec<(String, Experiment)>, CreditError> {
    let mut runs = Vec::new();
    for (label, cfg) in configs {
        on_setting(label);
        let (opt, test) = (&split.optimization, &split.test);
        let x = run_experiment(models, cfg.clone(), opt, test, dataset, options.clone()).await?;
        runs.push((label.clone(), x));
    }
    Ok(runs)
}

/// The sweep's table: one row per setting with each method's mean held-out accuracy (over
/// seeds) and the optimizer's mean calls.
pub fn sweep_markdown(rows: &[(String, &Experiment)]) -> String {
    let mut methods: Vec<String> = Vec::new();
    for (_, x) in rows {
        for m in &x.summary {
            if !methods.contains(&m.method) {
                methods.push(m.method.clone());
            }
        }
    }
    let mut out = String::from("# Sweep: held-out accuracy per setting\n\n| setting |");
    for m in &methods {
        out.push_str(&format!(" {m} |"));
    }
    out.push_str(" optimizer calls (ours) |\n|---|");
    out.push_str(&"---|".repeat(methods.len() + 1));
    out.push('\n');
    for (label, x) in rows {
        out.push_str(&format!(
            "| {} |",
            if label.is_empty() { "(config)" } else { label }
        ));
        for m in &methods {
            match x.summary.iter().find(|s| &s.method == m) {
                Some(s) => {
                    out.push_str(&format!(" {:.1}% ± {:.1} |", s.mean * 100.0, s.std * 100.0))
                }
                None => out.push_str(" n/a |"),
            }
        }
        let calls = x
            .summary
            .iter()
            .find(|s| s.method == "ours")
            .and_then(|s| s.calls)
            .map(|c| format!("{c:.0}"))
            .unwrap_or_else(|| "n/a".into());
        out.push_str(&format!(" {calls} |\n"));
    }
    out
}

/// A sweep's table ([`sweep_markdown`]) and its JSON: each setting's [`summary_json`], with its
/// output folder `out/<setting>` when there is one.
pub fn sweep_report(runs: &[(String, Experiment)], out: Option<&Path>) -> (String, Value) {
    let table = sweep_markdown(&runs.iter().map(|(l, x)| (l.clone(), x)).collect::<Vec<_>>());
    let json = Value::Array(
        runs.iter()
            .map(|(label, x)| {
                let out = out.map(|d| d.join(label));
                json!({"setting": label, "result": summary_json(x, out.as_deref())})
            })
            .collect(),
    );
    (table, json)
}

/// Write a sweep's folder: each setting's outputs ([`write_outputs`] with its configuration from
/// [`sweep_configs`]) in `dir/<setting>/`, then the table in `sweep.md` and the JSON in
/// `sweep.json` ([`sweep_report`]).
pub fn write_sweep(
    dir: &Path,
    runs: &[(String, Experiment)],
    configs: &[(String, Arc<DebateConfig>)],
    (table, json): (&str, &Value),
) -> std::io::Result<()> {
    for ((label, x), (_, c)) in runs.iter().zip(configs) {
        let d = dir.join(label);
        write_outputs(&d, x, c)
            .map_err(|e| std::io::Error::new(e.kind(), format!("writing {}: {e}", d.display())))?;
    }
    maslens_eval::atomic::write_atomic(dir.join("sweep.md"), table.as_bytes())?;
    maslens_eval::atomic::write_atomic(
        dir.join("sweep.json"),
        serde_json::to_string_pretty(json)?.as_bytes(),
    )
}

/// A dataset spec (`mmlu:PATH`, `aqua:PATH`, `jsonl:PATH` or a bare path) with a relative path
/// that does not exist from here taken relative to the configuration's folder.
pub fn resolve_dataset(spec: &str, config_dir: Option<&Path>) -> String {
    let (kind, path) = match spec.split_once(':') {
        Some((k, p)) if ["mmlu", "aqua", "jsonl"].contains(&k) => (Some(k), p),
        _ => (None, spec),
    };
    let p = Path::new(path);
    let resolved = match config_dir {
        Some(d) if p.is_relative() && !p.exists() => d.join(p).display().to_string(),
        _ => path.to_string(),
    };
    match kind {
        Some(k) => format!("{k}:{resolved}"),
        None => resolved,
    }
}

/// The dataset spec: the option, else `[data] dataset`, resolved against the config's folder.
pub fn dataset_spec(
    option: Option<&str>,
    data: Option<&DataConfig>,
    config_path: Option<&Path>,
) -> Result<String, CreditError> {
    let spec = option
        .map(str::to_string)
        .or(data.map(|d| d.dataset.clone()))
        .ok_or_else(|| {
            CreditError::Other(
                "no dataset: pass one (`--dataset`; `dataset=` in Python) or set [data] dataset in the configuration".into(),
            )
        })?;
    Ok(resolve_dataset(&spec, config_path.and_then(Path::parent)))
}

/// The questions of a debate's dataset: `dataset`, else the configuration's `[data]` (relative to
/// the configuration file at `config_path`). Returns what was read (records that could not be,
/// in its `problems`, for the caller to report) and the spec read.
pub fn load_questions(
    dataset: Option<&str>,
    cfg: &DebateConfig,
    config_path: Option<&Path>,
) -> Result<(Loaded, String), CoreError> {
    let spec = dataset_spec(dataset, cfg.data.as_ref(), config_path)?;
    let loaded = load_spec(&spec).map_err(CreditError::from)?;
    Ok((loaded, spec))
}

/// The split: options, else `[data]`, else seed 0, 100 optimization examples, all the rest tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitSpec {
    pub seed: u64,
    pub opt_size: usize,
    pub test_size: Option<usize>,
}

impl SplitSpec {
    pub fn resolve(
        data: Option<&DataConfig>,
        seed: Option<u64>,
        opt_size: Option<usize>,
        test_size: Option<usize>,
    ) -> SplitSpec {
        SplitSpec {
            seed: seed.or(data.map(|d| d.split_seed)).unwrap_or(0),
            opt_size: opt_size
                .or(data.map(|d| d.optimization_size))
                .unwrap_or(100),
            test_size: test_size.or(data.and_then(|d| d.test_size)),
        }
    }

    /// Split `items` ([`maslens_credit::data::split`]); an error when either side would be empty.
    pub fn split(&self, items: &[Mcq]) -> Result<Split, CreditError> {
        let split = maslens_credit::data::split(items, self.opt_size, self.test_size, self.seed);
        if split.optimization.is_empty() || split.test.is_empty() {
            return Err(CreditError::Other(format!(
                "{} questions cannot make {} optimization and a non-empty test set",
                items.len(),
                self.opt_size
            )));
        }
        Ok(split)
    }
}

/// The short JSON summary of an experiment (`--json`).
pub fn summary_json(x: &Experiment, out: Option<&Path>) -> Value {
    json!({
        "name": x.name, "model": x.model, "dataset": x.dataset,
        "n_optimization": x.n_optimization, "n_test": x.n_test, "summary": x.summary,
        "out": out.map(|p| p.display().to_string()),
    })
}

/// Write the output folder: reports, the initial / optimized / black-box prompts per seed, and
/// the held-out runs as maslens traces.
pub fn write_outputs(dir: &Path, x: &Experiment, cfg: &DebateConfig) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("traces"))?;
    maslens_eval::atomic::write_atomic(
        dir.join("report.json"),
        serde_json::to_string_pretty(x)?.as_bytes(),
    )?;
    maslens_eval::atomic::write_atomic(
        dir.join("report.md"),
        maslens_credit::report::markdown(x).as_bytes(),
    )?;
    maslens_eval::atomic::write_atomic(
        dir.join("report.html"),
        maslens_credit::report::html(x).as_bytes(),
    )?;
    let prompts: Vec<Value> = (x.seeds.iter())
        .map(|s| {
            json!({"seed": s.seed, "initial": cfg.prompts(), "optimized": s.bcd.best,
            "black_box": s.blackbox.as_ref().map(|b| &b.best)})
        })
        .collect();
    maslens_eval::atomic::write_atomic(
        dir.join("prompts.json"),
        serde_json::to_string_pretty(&prompts)?.as_bytes(),
    )?;
    for s in &x.seeds {
        for (name, runs) in &s.test_runs {
            let path = dir
                .join("traces")
                .join(format!("{name}-seed{}.jsonl", s.seed));
            let mut f = std::io::BufWriter::new(maslens_eval::atomic::AtomicFile::create(&path)?);
            let p = if name == "ours" {
                s.bcd.best.clone()
            } else {
                cfg.prompts()
            };
            for r in runs {
                let tr = to_trace(r, cfg, &p, &format!("{}/{name}/seed{}", cfg.name, s.seed));
                writeln!(f, "{}", serde_json::to_string(&tr)?)?;
            }
            f.into_inner().map_err(|e| e.into_error())?.commit()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_only_what_is_given() {
        let mut cfg = maslens_credit::simulation::config(2, 0, 0).unwrap();
        let before = cfg.optimizer.clone();
        Overrides::default().apply(&mut cfg).unwrap();
        assert_eq!(cfg.optimizer, before);
        let o = Overrides {
            iterations: Some(7),
            bottom_k: Some(1),
            lambda: Some(0.25),
            max_calls: Some(9),
            ..Overrides::default()
        };
        o.apply(&mut cfg).unwrap();
        assert_eq!(cfg.optimizer.iterations, 7);
        assert_eq!(cfg.optimizer.lambda, 0.25);
        assert_eq!(cfg.optimizer.max_calls, Some(9));
        assert_eq!(
            cfg.optimizer.role_selection,
            RoleSelection::BottomK { k: 1 }
        );
        assert_eq!(cfg.optimizer.tau, before.tau);
        let bad = Overrides {
            lambda: Some(1.5),
            ..Overrides::default()
        };
        assert!(bad.apply(&mut cfg).is_err());
    }

    #[test]
    fn sweep_configs_label_each_setting_and_name_a_bad_one() {
        let cfg = maslens_credit::simulation::config(2, 0, 0).unwrap();
        let one = sweep_configs(&cfg, &[]).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!((one[0].0.as_str(), &*one[0].1), ("", &cfg));
        let axes = ["tau=0.3,0.7".parse::<SweepAxis>().unwrap()];
        let two = sweep_configs(&cfg, &axes).unwrap();
        let labels: Vec<&str> = two.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["tau=0.3", "tau=0.7"]);
        assert_eq!(two[1].1.optimizer.tau, 0.7);
        let bad = ["round=1,9".parse::<SweepAxis>().unwrap()];
        let e = sweep_configs(&cfg, &bad).unwrap_err().to_string();
        assert!(
            e.starts_with("--sweep setting only_round=9: --only-round 9"),
            "{e}"
        );
    }

    #[test]
    fn split_spec_refuses_an_empty_side() {
        let items = maslens_credit::simulation::questions(10, 0);
        let sp = SplitSpec::resolve(None, Some(1), Some(4), None);
        let s = sp.split(&items).unwrap();
        assert_eq!((s.optimization.len(), s.test.len()), (4, 6));
        let all = SplitSpec::resolve(None, Some(1), Some(10), None);
        assert_eq!(
            all.split(&items).unwrap_err().to_string(),
            "10 questions cannot make 10 optimization and a non-empty test set"
        );
    }

    #[test]
    fn sweep_axes_parse_and_make_the_grid() {
        let a: SweepAxis = "tau=0.3,0.7".parse().unwrap();
        let b: SweepAxis = "round=1,2".parse().unwrap();
        assert_eq!((a.key, a.values.clone()), (SweepKey::Tau, vec![0.3, 0.7]));
        let grid = sweep_grid(&[a, b]);
        let labels: Vec<String> = grid.iter().map(|g| setting_label(g)).collect();
        assert_eq!(
            labels,
            [
                "tau=0.3,only_round=1",
                "tau=0.3,only_round=2",
                "tau=0.7,only_round=1",
                "tau=0.7,only_round=2"
            ]
        );
        assert_eq!(sweep_grid(&[]), vec![Vec::new()]);
        for bad in ["tau", "gamma=1", "m=2.5", "round=x", "tau="] {
            assert!(bad.parse::<SweepAxis>().is_err(), "{bad}");
        }
        let mut cfg = maslens_credit::simulation::config(2, 0, 0).unwrap();
        apply_setting(&mut cfg, &grid[3]).unwrap();
        assert_eq!(
            (cfg.optimizer.tau, cfg.optimizer.only_round),
            (0.7, Some(2))
        );
        // A round the debate does not have is refused.
        assert!(apply_setting(&mut cfg, &[(SweepKey::OnlyRound, 3.0)]).is_err());
    }

    #[test]
    fn dataset_specs_and_splits_resolve_in_order() {
        let dir = Path::new("/cfgdir");
        assert_eq!(
            resolve_dataset("mmlu:no/such/dir", Some(dir)),
            "mmlu:/cfgdir/no/such/dir"
        );
        assert_eq!(resolve_dataset("other:x", None), "other:x");
        assert_eq!(resolve_dataset("/abs.jsonl", Some(dir)), "/abs.jsonl");
        let data = DataConfig {
            dataset: "aqua:q.json".into(),
            optimization_size: 10,
            test_size: Some(5),
            split_seed: 3,
        };
        let cfg_path = Path::new("/cfgdir/debate.toml");
        assert_eq!(
            dataset_spec(None, Some(&data), Some(cfg_path)).unwrap(),
            "aqua:/cfgdir/q.json"
        );
        assert_eq!(
            dataset_spec(Some("jsonl:/x"), Some(&data), None).unwrap(),
            "jsonl:/x"
        );
        assert!(dataset_spec(None, None, None).is_err());
        let s = SplitSpec::resolve(Some(&data), None, Some(20), None);
        assert_eq!((s.seed, s.opt_size, s.test_size), (3, 20, Some(5)));
        let s = SplitSpec::resolve(None, None, None, None);
        assert_eq!((s.seed, s.opt_size, s.test_size), (0, 100, None));
    }
}
