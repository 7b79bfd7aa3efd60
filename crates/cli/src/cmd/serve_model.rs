//! `maslens serve-model`: the embedded model behind an OpenAI-compatible endpoint on loopback.

use crate::Global;
use anyhow::Context;
use maslens_llm::local::LocalOptions;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Embedded model to serve: `local:smollm2-135m`, `local:/path/model.gguf`,
    /// `local:/path/model.gguf+/path/adapter.gguf`.
    #[arg(long, env = "MASLENS_MODEL", default_value = "local:smollm2-135m")]
    pub model: String,
    /// Address to bind; loopback unless `--allow-remote`.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port; 0 picks a free one (the bound address is printed on stdout).
    #[arg(long, default_value_t = 8088)]
    pub port: u16,
    /// Model name announced in `/v1/models` and responses (default: the spec, e.g. `local:smollm2-135m`).
    #[arg(long)]
    pub served_name: Option<String>,
    /// CPU threads for inference.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Context window per slot in tokens.
    #[arg(long)]
    pub context_size: Option<u32>,
    /// KV-cache slots: prompts remembered for prefix reuse (each costs a context's memory).
    #[arg(long, default_value_t = 1)]
    pub slots: usize,
    /// Evaluate every prompt from scratch (to measure what prefix reuse saves).
    #[arg(long)]
    pub no_prefix_reuse: bool,
    /// Allow binding a non-loopback address (the server has no authentication).
    #[arg(long)]
    pub allow_remote: bool,
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let Some(spec) = args.model.strip_prefix("local:") else {
        anyhow::bail!(
            "serve-model serves embedded models only: expected `--model local:NAME_OR_PATH`, got {:?}",
            args.model
        );
    };
    if !args.host.is_loopback() && !args.allow_remote {
        anyhow::bail!(
            "refusing to bind {}: the endpoint has no authentication; use a loopback address or pass --allow-remote",
            args.host
        );
    }
    let opts = LocalOptions {
        threads: args.threads,
        context_size: args.context_size,
        slots: args.slots.max(1),
        prefix_reuse: !args.no_prefix_reuse,
        ..LocalOptions::default()
    };
    #[cfg(feature = "local")]
    let (model, streamer) = {
        let local = maslens_llm::local::open_local_model(spec, &opts)
            .with_context(|| format!("cannot open {}", args.model))?;
        let model: std::sync::Arc<dyn maslens_llm::ChatModel> = local.clone();
        let streamer: std::sync::Arc<dyn maslens_server::StreamingModel> = local;
        (model, Some(streamer))
    };
    #[cfg(not(feature = "local"))]
    let (model, streamer) = (
        maslens_llm::local::open_local(spec, &opts)
            .with_context(|| format!("cannot open {}", args.model))?,
        None,
    );
    let name = args
        .served_name
        .clone()
        .unwrap_or_else(|| args.model.clone());
    let router = maslens_server::router_with_streaming(model.clone(), streamer, name.clone());
    let addr = SocketAddr::new(args.host, args.port);
    super::block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot bind {addr}"))?;
        let bound = listener.local_addr()?;
        let context = model
            .context_size()
            .map(|n| n.to_string())
            .unwrap_or_else(|| "?".into());
        if global.json {
            crate::outln!(
                "{}",
                serde_json::json!({"base_url": format!("http://{bound}/v1"), "model": name, "context_size": model.context_size()})
            );
        } else {
            crate::outln!("listening on http://{bound}/v1 (model {name}, context {context} tokens); Ctrl-C or SIGTERM stops");
        }
        std::io::stdout().flush()?;
        let shutdown = maslens_server::shutdown_signal();
        maslens_server::serve(listener, router, shutdown)
            .await
            .context("server failed")?;
        Ok::<_, anyhow::Error>(())
    })??;
    Ok(ExitCode::from(super::EXIT_OK))
}
