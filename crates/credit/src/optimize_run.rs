//! What `maslens optimize` resolves before and after [`crate::experiment::run_experiment`]: option
//! overrides of the `[optimizer]` table, the dataset spec and split (option, else `[data]`, else
//! default), and the output folder (`report.json`, `report.md`, `report.html`, `prompts.json`,
//! `traces/<method>-seed<S>.jsonl`).

use crate::config::{Blocks, DataConfig, DebateConfig, RoleSelection};
use crate::debate::to_trace;
use crate::experiment::Experiment;
use crate::CreditError;
use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;

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
        Ok(())
    }
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
                "no dataset: pass --dataset or set [data] dataset in the configuration".into(),
            )
        })?;
    Ok(resolve_dataset(&spec, config_path.and_then(Path::parent)))
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
    std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(x)?)?;
    std::fs::write(dir.join("report.md"), crate::report::markdown(x))?;
    std::fs::write(dir.join("report.html"), crate::report::html(x))?;
    let prompts: Vec<Value> = (x.seeds.iter())
        .map(|s| {
            json!({"seed": s.seed, "initial": cfg.prompts(), "optimized": s.bcd.best,
            "black_box": s.blackbox.as_ref().map(|b| &b.best)})
        })
        .collect();
    std::fs::write(
        dir.join("prompts.json"),
        serde_json::to_string_pretty(&prompts)?,
    )?;
    for s in &x.seeds {
        for (name, runs) in &s.test_runs {
            let path = dir
                .join("traces")
                .join(format!("{name}-seed{}.jsonl", s.seed));
            let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
            let p = if name == "ours" {
                s.bcd.best.clone()
            } else {
                cfg.prompts()
            };
            for r in runs {
                let tr = to_trace(r, cfg, &p, &format!("{}/{name}/seed{}", cfg.name, s.seed));
                writeln!(f, "{}", serde_json::to_string(&tr)?)?;
            }
            f.flush()?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_replace_only_what_is_given() {
        let mut cfg = crate::simulation::config(2, 0, 0).unwrap();
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
