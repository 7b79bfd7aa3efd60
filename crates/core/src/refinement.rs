//! AgentLocate's fine-tuning loop as files and checks (section 3.3, eq. 5-6): export the
//! refinement data ([`export_refinement`]: z_q instances, protocol examples, `manifest.json`,
//! the TRL command, the scripts that serve the adapter and evaluate it), then, once the user has
//! trained and served the adapter, tie the evaluation of the fine-tuned Judge to that data
//! ([`attach_finetune`]: what it was trained on, and whether any evaluated trace was in it).
//!
//! The loop: `maslens eval locate DATA --split 0.6 --seed 1 --export-refinement DIR` ->
//! `sh DIR/trl_sft.sh` (on the user's GPU) -> `sh DIR/serve_adapter.sh` (vLLM with
//! `--enable-lora`; or llama.cpp's GGUF adapter with `local:BASE.gguf+ADAPTER.gguf`) ->
//! `sh DIR/evaluate.sh openai:judge-ft@http://127.0.0.1:8000/v1`, which runs
//! `maslens eval locate` on the other side of the same split with `--variant judge-ft
//! --finetuned-on DIR`.

use crate::eval_locate::{EvalLocateOutput, RefineExport, RefineTargets};
use crate::CoreError;
use maslens_eval::atomic::write_atomic;
use maslens_eval::run::{LabelledCase, Progress};
use maslens_locate::refine::{
    example_tokens, max_length_for, openai_command, protocol_examples, trl_command, trl_example,
    RefinementInstance, RefinementManifest, EXPORT_FORMAT_VERSION,
};
use maslens_locate::{LocateConfig, Locator};
use std::path::{Path, PathBuf};

/// Where the exported data came from (written into `manifest.json` and `evaluate.sh`).
#[derive(Debug, Clone)]
pub struct ExportSource {
    /// The dataset spec as given (`whowhen:DIR`, `aegis:FILE`, a path).
    pub dataset: String,
    pub split: Option<f64>,
    pub seed: u64,
    pub subset: Option<String>,
}

/// `text` as one single-quoted shell word.
fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The dataset spec with its path made absolute, so that the scripts run from any directory.
fn absolute_spec(spec: &str) -> String {
    let (prefix, path) = match spec.split_once(':') {
        Some((p, rest)) if p == "whowhen" || p == "aegis" => (format!("{p}:"), rest),
        _ => (String::new(), spec),
    };
    let abs = std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path));
    format!("{prefix}{}", abs.display())
}

/// The directory as an absolute path (it exists: the export created it).
fn absolute(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// `evaluate.sh`: the `maslens eval locate` run that evaluates the fine-tuned Judge the same way
/// the data was made (same dataset, split, seed, subset, protocol and prompt settings), on the
/// side of the split that the data left out.
pub fn evaluate_script(m: &RefinementManifest, dir: &Path) -> String {
    let d = absolute(dir).display().to_string();
    let mut flags = vec![
        "eval".to_string(),
        "locate".into(),
        sh_quote(&absolute_spec(&m.dataset)),
    ];
    if let Some(f) = m.split {
        flags.push(format!("--split {f}"));
    }
    flags.push(format!("--seed {}", m.seed));
    if let Some(s) = &m.subset {
        flags.push(format!("--subset {}", sh_quote(s)));
    }
    // The fine-tuned Judge alone (eq. 6), not stacked with the prior.
    flags.push("--method llm".into());
    flags.push(format!("--protocol {}", m.protocol.as_str()));
    flags.push("--variant judge-ft".into());
    flags.push(format!("--finetuned-on {}", sh_quote(&d)));
    if m.settings.with_ground_truth {
        flags.push("--with-ground-truth".into());
    }
    flags.push(format!(
        "--error-modes {}",
        if m.settings.error_modes.is_empty() {
            "none"
        } else {
            "aegis"
        }
    ));
    flags.push(format!(
        "--max-answer-tokens {}",
        m.settings.max_answer_tokens
    ));
    if let Some(n) = m.context_size {
        // The window the training prompts were cut to (the served model may not report one).
        flags.push(format!("--context-size {n}"));
    }
    flags.push("--model \"$MODEL\"".into());
    flags.push(format!(
        "--out {}",
        sh_quote(&format!("{d}/eval-round{}", m.round))
    ));
    let split_note = if m.split.is_some() {
        "# It evaluates the other side of the split, disjoint from the refinement data."
    } else {
        "# The export ran without --split: its data holds every case, so this evaluation is\n# in-sample and `eval locate` says so (exit 1). Export with --split F to keep them apart."
    };
    format!(
        "#!/bin/sh\n\
         # Evaluate the Judge fine-tuned on this directory's data (refinement round {round}, {targets} targets:\n\
         # {paper}), the same way the data was made: {protocol} protocol, same dataset, split and seed.\n\
         {split_note}\n\
         # usage: sh evaluate.sh MODEL_SPEC [more eval flags]\n\
         #   MODEL_SPEC: openai:judge-ft@http://127.0.0.1:8000/v1 (serve_adapter.sh), or\n\
         #               local:/path/base.gguf+/path/adapter.gguf (llama.cpp GGUF adapter)\n\
         # MASLENS names the maslens binary (default: maslens on PATH).\n\
         set -e\n\
         MODEL=\"${{1:?usage: sh evaluate.sh MODEL_SPEC (the fine-tuned Judge)}}\"\n\
         shift\n\
         exec \"${{MASLENS:-maslens}}\" {flags} \"$@\"\n",
        round = m.round,
        targets = m.targets,
        paper = m.paper_output(),
        protocol = m.protocol.as_str(),
        flags = flags.join(" \\\n  "),
    )
}

/// `serve_adapter.sh`: serve the trained LoRA adapter as an OpenAI-compatible model named
/// `judge-ft` (vLLM `--enable-lora`; the paper's rank 64 needs `--max-lora-rank 64`), with the
/// llama.cpp route in comments.
pub fn serve_script(m: &RefinementManifest) -> String {
    format!(
        "#!/bin/sh\n\
         # Serve the Judge fine-tuned by trl_sft.sh (adapter in {adapter}) as model `judge-ft`.\n\
         # Then evaluate it: sh evaluate.sh openai:judge-ft@http://127.0.0.1:${{PORT:-8000}}/v1\n\
         #\n\
         # Without vLLM (CPU, llama.cpp): convert the adapter to GGUF with llama.cpp's\n\
         #   python convert_lora_to_gguf.py {adapter} --base <the base model's HF directory> --outfile {adapter}.gguf\n\
         # and evaluate local:/path/base.gguf+{adapter}.gguf directly (or serve it with\n\
         #   maslens serve-model --model local:/path/base.gguf+{adapter}.gguf\n\
         # and evaluate openai:local@<the URL it prints>).\n\
         set -e\n\
         exec vllm serve {base} \\\n  --enable-lora \\\n  --lora-modules judge-ft={adapter} \\\n  --max-lora-rank {rank} \\\n  --host 127.0.0.1 --port \"${{PORT:-8000}}\"\n",
        adapter = sh_quote(&m.adapter_dir),
        base = sh_quote(&m.base_model),
        rank = maslens_locate::refine::LORA_R,
    )
}

/// Write the refinement data of `side` into `export.dir` (format [`EXPORT_FORMAT_VERSION`]):
/// `instances.jsonl` (z_q with its protocol), `train.jsonl` (chat format, the protocol's own
/// prompts: several examples per instance for step-by-step and binary search), `trl/train.jsonl`
/// (prompt-completion), `manifest.json`, `trl_sft.sh`, `serve_adapter.sh`, `evaluate.sh` and
/// `openai_finetune.txt`. Returns the number of instances.
pub async fn export_refinement(
    export: &RefineExport,
    source: &ExportSource,
    side: &[LabelledCase],
    locator: &Locator<'_>,
    cfg: &LocateConfig,
    progress: &dyn Progress,
) -> Result<usize, CoreError> {
    let dir = &export.dir;
    let io = |what: &str| CoreError::io(format!("{what} in {}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io("creating the directory"))?;
    let mut train = String::new();
    let mut trl = String::new();
    let mut instances = String::new();
    let mut traces = Vec::new();
    let mut examples = 0;
    let mut longest = 0usize;
    progress.start(side.len());
    for c in side {
        let t = &c.trace;
        progress.case(&format!("refine {}", t.id));
        let inst = match export.targets {
            RefineTargets::Gold => RefinementInstance::from_gold(t, cfg.protocol, export.round),
            RefineTargets::Verified => match locator.locate(t, None).await {
                Ok(v) => RefinementInstance::from_verdict(t, &v, export.round),
                Err(e) => {
                    progress.error(&t.id, &format!("refinement: {e}"));
                    None
                }
            },
        };
        progress.case_done();
        let Some(mut inst) = inst else { continue };
        let exs = protocol_examples(locator.judge, t, &inst, &cfg.settings)
            .await
            .map_err(|e| CoreError::Invalid(format!("{}: refinement examples: {e}", t.id)))?;
        for ex in &exs {
            train.push_str(&serde_json::to_string(ex).unwrap_or_default());
            train.push('\n');
            trl.push_str(&serde_json::to_string(&trl_example(ex)).unwrap_or_default());
            trl.push('\n');
            longest = longest.max(example_tokens(locator.judge, ex));
        }
        inst.examples = exs.len();
        examples += exs.len();
        instances.push_str(&serde_json::to_string(&inst).unwrap_or_default());
        instances.push('\n');
        traces.push(t.id.clone());
    }
    progress.finish();
    write_atomic(dir.join("train.jsonl"), train).map_err(io("writing train.jsonl"))?;
    // TRL reads every data file of the directory it is given: its file gets a folder of its own.
    std::fs::create_dir_all(dir.join("trl")).map_err(io("creating trl/"))?;
    write_atomic(dir.join("trl/train.jsonl"), trl).map_err(io("writing trl/train.jsonl"))?;
    write_atomic(dir.join("instances.jsonl"), instances).map_err(io("writing instances.jsonl"))?;
    let d = absolute(dir).display().to_string();
    let max_length = max_length_for(longest);
    let targets = match export.targets {
        RefineTargets::Verified => "verified",
        RefineTargets::Gold => "gold",
    };
    let n = traces.len();
    let manifest = RefinementManifest {
        format_version: EXPORT_FORMAT_VERSION,
        maslens_version: env!("CARGO_PKG_VERSION").to_string(),
        round: export.round,
        targets: targets.into(),
        protocol: cfg.protocol,
        judge_model: locator.judge.id().to_string(),
        context_size: locator.judge.context_size(),
        base_model: export.base_model.clone(),
        adapter_dir: format!("{d}/lora-round{}", export.round),
        dataset: source.dataset.clone(),
        split: source.split,
        seed: source.seed,
        subset: source.subset.clone(),
        settings: cfg.settings.clone(),
        instances: n,
        examples,
        longest_example_tokens: longest,
        max_length,
        traces,
    };
    write_atomic(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(&manifest).unwrap_or_default() + "\n",
    )
    .map_err(io("writing manifest.json"))?;
    let script = format!(
        "#!/bin/sh\n# Refinement round {} ({targets} targets, {n} instances, {examples} {} examples{}).\n# LoRA settings of AgentLocate: r 64, alpha 128, dropout 0.05, 3 epochs, effective batch 16.\n# Longest example: {longest} tokens ({}'s count); --max_length {max_length} keeps every answer; the loss is on the answer only.\n# Next: sh serve_adapter.sh, then sh evaluate.sh MODEL_SPEC.\nset -e\n{}",
        export.round,
        cfg.protocol.as_str(),
        if source.split.is_some() {
            ", train side of the split, disjoint from evaluation"
        } else {
            "; not split: keep these traces out of evaluation"
        },
        locator.judge.id(),
        trl_command(
            &format!("{d}/trl"),
            &export.base_model,
            &manifest.adapter_dir,
            max_length,
        )
    );
    write_atomic(dir.join("trl_sft.sh"), script).map_err(io("writing trl_sft.sh"))?;
    write_atomic(dir.join("serve_adapter.sh"), serve_script(&manifest))
        .map_err(io("writing serve_adapter.sh"))?;
    write_atomic(dir.join("evaluate.sh"), evaluate_script(&manifest, dir))
        .map_err(io("writing evaluate.sh"))?;
    write_atomic(
        dir.join("openai_finetune.txt"),
        openai_command(&format!("{d}/train.jsonl"), "gpt-4o-2024-08-06"),
    )
    .map_err(io("writing openai_finetune.txt"))?;
    Ok(n)
}

/// Check `--finetuned-on DIR` before an evaluation runs (a wrong directory should not cost a
/// whole evaluation): it describes a fine-tuned Judge, so it needs `--variant judge-ft`, and its
/// manifest must read. Returns a note for a `judge-ft` run without it (the report cannot say
/// what the Judge was fine-tuned on).
pub fn check_finetuned_on(
    variant: maslens_locate::Variant,
    dir: Option<&Path>,
) -> Result<Option<&'static str>, CoreError> {
    let judge_ft = variant == maslens_locate::Variant::JudgeFt;
    match dir {
        Some(_) if !judge_ft => Err(CoreError::Invalid(
            "--finetuned-on describes a fine-tuned Judge: use it with --variant judge-ft".into(),
        )),
        Some(dir) => RefinementManifest::read(dir)
            .map(|_| None)
            .map_err(CoreError::Invalid),
        None if judge_ft => Ok(Some(
            "--variant judge-ft takes --model to be the fine-tuned Judge; without --finetuned-on DIR the report cannot say what it was fine-tuned on",
        )),
        None => Ok(None),
    }
}

/// Tie an evaluation of a fine-tuned Judge (`--variant judge-ft`) to the refinement data it
/// was trained on: the report's `config.finetune` records the manifest (round, targets,
/// protocol, base and producing models, instances, examples) and `config.output` which of the
/// paper's outputs the run gives (AgentLocate, or Variant III for gold targets). Every evaluated
/// trace that was in the refinement data is a problem (the paper keeps the refinement set
/// disjoint from evaluation), and so is a Judge model that is the one that made the data (not
/// fine-tuned) or a protocol other than the examples'.
pub fn attach_finetune(out: &mut EvalLocateOutput, dir: &Path) -> Result<(), CoreError> {
    let m = RefinementManifest::read(dir).map_err(CoreError::Invalid)?;
    let report = &mut out.run.report;
    let trained: std::collections::HashSet<&str> = m.traces.iter().map(String::as_str).collect();
    let overlap: Vec<&str> = report
        .per_case
        .iter()
        .map(|c| c.id.as_str())
        .filter(|id| trained.contains(id))
        .collect();
    if !overlap.is_empty() {
        out.problems.push(format!(
            "{} of {} evaluated traces are in the refinement data the Judge was fine-tuned on ({}; e.g. {}): the evaluation is not held out",
            overlap.len(),
            report.per_case.len(),
            dir.join("manifest.json").display(),
            overlap[0]
        ));
    }
    let config = &report.config;
    if config["protocol"].as_str() != Some(m.protocol.as_str()) {
        out.problems.push(format!(
            "the Judge was fine-tuned on {} examples ({}) but evaluated with the {} protocol",
            m.protocol.as_str(),
            dir.join("manifest.json").display(),
            config["protocol"].as_str().unwrap_or("?")
        ));
    }
    if report.model.as_deref() == Some(m.judge_model.as_str()) {
        out.problems.push(format!(
            "--model {} is the model that made the refinement data, not the Judge fine-tuned on it",
            m.judge_model
        ));
    }
    let finetune = serde_json::json!({
        "dir": absolute(dir).display().to_string(),
        "format_version": m.format_version,
        "round": m.round,
        "targets": m.targets,
        "protocol": m.protocol,
        "judge_model": m.judge_model,
        "base_model": m.base_model,
        "instances": m.instances,
        "examples": m.examples,
        "evaluated_in_refinement_data": overlap.len(),
    });
    if let Some(c) = report.config.as_object_mut() {
        c.insert("finetune".into(), finetune);
        c.insert(
            "output".into(),
            serde_json::Value::String(format!(
                "{}: the fine-tuned Judge's answer (i_final, t_final), eq. 6",
                m.paper_output()
            )),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use maslens_locate::{Protocol, Settings};

    #[test]
    fn finetuned_on_goes_with_judge_ft_and_a_readable_manifest() {
        use maslens_locate::Variant;
        assert_eq!(check_finetuned_on(Variant::Verified, None).unwrap(), None);
        assert!(check_finetuned_on(Variant::JudgeFt, None)
            .unwrap()
            .is_some());
        let dir = tempfile::tempdir().unwrap();
        let e = check_finetuned_on(Variant::Verified, Some(dir.path())).unwrap_err();
        assert!(
            e.to_string().contains("use it with --variant judge-ft"),
            "{e}"
        );
        let e = check_finetuned_on(Variant::JudgeFt, Some(dir.path())).unwrap_err();
        assert!(e.to_string().contains("manifest.json"), "{e}");
    }

    #[test]
    fn refine_targets_parse_by_name() {
        assert_eq!(
            "gold".parse::<RefineTargets>().unwrap(),
            RefineTargets::Gold
        );
        assert_eq!(
            "verified".parse::<RefineTargets>().unwrap(),
            RefineTargets::Verified
        );
        assert!("silver".parse::<RefineTargets>().is_err());
    }

    fn manifest(split: Option<f64>, context_size: Option<usize>) -> RefinementManifest {
        RefinementManifest {
            format_version: EXPORT_FORMAT_VERSION,
            maslens_version: "0".into(),
            round: 2,
            targets: "gold".into(),
            protocol: Protocol::BinarySearch,
            judge_model: "local:m".into(),
            context_size,
            base_model: "org/base".into(),
            adapter_dir: "/r/lora-round2".into(),
            dataset: "aegis:/no/such/file.jsonl".into(),
            split,
            seed: 3,
            subset: Some("it's".into()),
            settings: Settings {
                with_ground_truth: true,
                error_modes: vec!["FM-1.1".into()],
                max_answer_tokens: 200,
            },
            instances: 1,
            examples: 3,
            longest_example_tokens: 900,
            max_length: 1024,
            traces: vec!["a".into()],
        }
    }

    #[test]
    fn evaluate_script_repeats_how_the_data_was_made() {
        let s = evaluate_script(&manifest(Some(0.6), Some(2048)), Path::new("/r"));
        for want in [
            "'aegis:/no/such/file.jsonl'",
            "--split 0.6",
            "--seed 3",
            r"--subset 'it'\''s'",
            "--protocol binary-search",
            "--variant judge-ft",
            "--finetuned-on '/r'",
            "--with-ground-truth",
            "--error-modes aegis",
            "--max-answer-tokens 200",
            "--context-size 2048",
            "--out '/r/eval-round2'",
            "Variant III",
        ] {
            assert!(s.contains(want), "missing {want} in\n{s}");
        }
        let s = evaluate_script(&manifest(None, None), Path::new("/r"));
        assert!(
            !s.contains("  --split ") && !s.contains("--context-size"),
            "{s}"
        );
        assert!(s.contains("in-sample"), "{s}");
        let serve = serve_script(&manifest(None, None));
        assert!(
            serve.contains("vllm serve 'org/base'") && serve.contains("judge-ft='/r/lora-round2'")
        );
    }
}
