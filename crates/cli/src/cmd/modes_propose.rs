//! `maslens modes --propose MODE`: a fix proposed for one failure mode, from a store (stored on
//! the mode's example runs, as `serve` stores it) or from trace files (printed only).

use super::{selection, Args};
use crate::cmd::{block_on, EXIT_OK, EXIT_PROBLEMS};
use crate::llm_args::finish;
use crate::ui::write_output;
use crate::Global;
use maslens_core::improve::{self, FixProposal, ModeToFix};
use maslens_core::modes::{self, ModesReport};
use maslens_server::serve::modes::ModesQuery;
use maslens_server::serve::propose::{prepare, store_proposal, ProposeRequest};
use maslens_trace::Trace;
use std::process::ExitCode;
use std::time::Instant;

pub fn run(
    args: &Args,
    global: &Global,
    query: &ModesQuery,
    report: &ModesReport,
    mode: &str,
    traces: Vec<Trace>,
) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let (system, _) = report.find(args.system.as_deref(), mode)?;
    let req = ProposeRequest {
        system: system.to_string(),
        mode: mode.to_string(),
        outcome: query.outcome.clone(),
        similarity: query.similarity,
    };
    let (proposal, stored) = block_on(async {
        let store = match &args.input.db {
            Some(db) => Some(crate::db::open(db).await?),
            None => None,
        };
        let prepared = match &store {
            Some(store) => prepare(store, &req).await?,
            None => of_files(args, query, &req, traces)?,
        };
        let stack = args.llm.build().await?;
        let proposal = improve::propose(
            stack.model.as_ref(),
            &prepared.system,
            &prepared.mode,
            &prepared.traces,
            400,
            0,
        )
        .await;
        finish(&stack, global.quiet);
        let proposal = proposal?;
        let stored = match &store {
            Some(store) => store_proposal(store, &proposal, &prepared, &[], started).await?,
            None => Vec::new(),
        };
        if let Some(store) = store {
            store.close().await;
        }
        anyhow::Ok((proposal, stored))
    })??;
    print(&proposal, &stored, global)?;
    Ok(ExitCode::from(if proposal.rewrite.prompt.is_some() {
        EXIT_OK
    } else {
        EXIT_PROBLEMS
    }))
}

/// The mode from the trace files (grouped with the proposal's number of examples).
fn of_files(
    args: &Args,
    query: &ModesQuery,
    req: &ProposeRequest,
    traces: Vec<Trace>,
) -> anyhow::Result<ModeToFix> {
    let selection = modes::Selection {
        system: Some(req.system.clone()),
        ..selection(args)
    };
    Ok(improve::mode_of_traces(
        traces,
        &selection,
        query.options()?,
        &req.mode,
    )?)
}

fn print(proposal: &FixProposal, stored: &[String], global: &Global) -> anyhow::Result<()> {
    if global.json {
        let out = serde_json::json!({"proposal": proposal, "diagnoses": stored});
        write_output(None, &serde_json::to_string_pretty(&out)?)?;
    } else {
        write_output(None, &proposal.to_markdown())?;
    }
    if !stored.is_empty() {
        eprintln!(
            "stored on {} run(s) as a `propose` diagnosis (not queued for write-back: `maslens \
             serve`'s button and API write proposals back)",
            stored.len()
        );
    }
    if let Some(why) = &proposal.rewrite.rejected {
        eprintln!("no proposal: {why}");
    }
    Ok(())
}
