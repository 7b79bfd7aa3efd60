//! `maslens serve`: receive OpenTelemetry traces, store them, diagnose them, write the diagnoses
//! back (see docs/serve.md). Glue only: flags -> `maslens_server::serve::ServeConfig`.

use crate::llm_args::LlmArgs;
use crate::Global;
use anyhow::Context;
use maslens_server::serve::{AppState, JobMethod, Policy, ServeConfig, WriteBack};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  maslens serve                                   # loopback:4318, SQLite in $MASLENS_HOME/maslens.db
  maslens serve --db postgres://maslens@db/maslens --host 0.0.0.0 --token \"$TOKEN\"
  maslens serve --diagnose all --phoenix http://127.0.0.1:6006
Point an OpenTelemetry exporter at it:
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces")]
pub struct Args {
    /// Store: a `postgres://` URL, a `sqlite:` URL or a SQLite file (default
    /// `$MASLENS_HOME/maslens.db`).
    #[arg(long, env = "MASLENS_DB")]
    pub db: Option<String>,
    /// Address to bind; any non-loopback address needs `--token`.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port (4318 is OTLP/HTTP's); 0 picks a free one (the bound address is printed on stdout).
    #[arg(long, default_value_t = 4318)]
    pub port: u16,
    /// A host name (any port) this server answers to besides the loopback names, against DNS
    /// rebinding (repeat the flag). On a non-loopback `--host` without it, any name is answered.
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// The address of a reverse proxy in front of this server (repeat the flag): from such a
    /// peer the client is the nearest address in `X-Forwarded-For` that is not a trusted proxy,
    /// so failed sign-ins and tokens are limited per client rather than per proxy. Never give an
    /// address clients can connect from directly.
    #[arg(long = "trusted-proxy", value_name = "IP")]
    pub trusted_proxies: Vec<IpAddr>,
    /// Bearer token required on every route but /health.
    #[arg(long, env = "MASLENS_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Which completed runs the LLM methods diagnose on arrival (the prior localizes every run).
    #[arg(long, value_enum, default_value = "failed")]
    pub diagnose: DiagnoseArg,
    /// LLM methods queued on arrival (repeat the flag): `locate` (the default localizer,
    /// stacked, as `maslens locate`), `llm` (the LLM pipeline alone), `scan`.
    #[arg(long = "on-arrival", value_enum, default_values = ["locate"])]
    pub on_arrival: Vec<MethodArg>,
    /// Seconds without new spans after the root span arrived before a run counts as complete.
    #[arg(long, default_value_t = 2.0)]
    pub settle: f64,
    /// Seconds without new spans before a run without a root span counts as complete.
    #[arg(long, default_value_t = 60.0)]
    pub idle: f64,
    /// A run still receiving spans whose last assembly took T (20 ms or more) is assembled again
    /// only after this many times T: assembly of a run sent in many batches stays linear in its
    /// size, and its stored trace lags by up to that long (0: assemble on every pass).
    #[arg(long, default_value_t = 4.0)]
    pub assembly_pace: f64,
    /// Seconds after which a job claimed by a server that stopped answering is queued again.
    #[arg(long, default_value_t = 900.0)]
    pub job_lease: f64,
    /// Seconds a job may run before it fails with the reason (a model that never answers);
    /// shorter than --job-lease [default: 600, or 90% of a shorter --job-lease]
    #[arg(long)]
    pub job_timeout: Option<f64>,
    /// Largest request body in MiB (before and after decompression).
    #[arg(long, default_value_t = 64)]
    pub max_body_mib: usize,
    /// Write diagnoses to this OTLP/HTTP logs endpoint as gen_ai.evaluation.result events.
    #[arg(long, value_name = "URL")]
    pub otlp_export: Option<String>,
    /// Seconds one write-back send may take; a delivery claimed by a server that died is sent
    /// by another after twice this.
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    pub writeback_timeout: f64,
    /// Write diagnoses to this Arize Phoenix as span annotations.
    #[arg(long, value_name = "URL")]
    pub phoenix: Option<String>,
    /// Phoenix API key.
    #[arg(long, env = "PHOENIX_API_KEY", hide_env_values = true)]
    pub phoenix_token: Option<String>,
    #[command(flatten)]
    pub llm: LlmArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum DiagnoseArg {
    Off,
    Failed,
    All,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum MethodArg {
    Locate,
    Llm,
    Scan,
}

/// The longest `--settle`, `--idle` or `--job-lease`: a week.
const MAX_SECS: f64 = 7.0 * 24.0 * 3600.0;
/// The largest `--max-body-mib`: 4 GiB.
const MAX_BODY_MIB: usize = 4096;

fn secs(v: f64, flag: &str) -> anyhow::Result<Duration> {
    if !(v.is_finite() && (0.0..=MAX_SECS).contains(&v)) {
        anyhow::bail!("{flag} must be a number of seconds from 0 to {MAX_SECS} (a week), not {v}");
    }
    Ok(Duration::from_secs_f64(v))
}

fn pace(v: f64) -> anyhow::Result<f64> {
    maslens_server::serve::pace::AssemblyPace::check(v)
        .map_err(|e| anyhow::anyhow!("--assembly-pace {e}"))
}

/// `--token` as given, refused when empty or blank: an unset variable that expanded to nothing
/// must not pass for a token (the UI would then sign in anyone with an empty one).
fn token(given: Option<&str>) -> anyhow::Result<Option<String>> {
    match given {
        Some(t) if t.trim().is_empty() => anyhow::bail!(
            "--token (or MASLENS_TOKEN) is empty: give a real token, or leave it unset on a loopback address"
        ),
        other => Ok(other.map(String::from)),
    }
}

/// The Host names served: loopback names on a loopback address, plus `--allow-host`.
fn allowed_hosts(args: &Args) -> Option<Vec<String>> {
    let loopback = maslens_server::serve::guard::LOOPBACK_HOSTS.map(String::from);
    match (args.host.is_loopback(), args.allow_host.is_empty()) {
        (true, _) => Some(
            loopback
                .into_iter()
                .chain(args.allow_host.clone())
                .collect(),
        ),
        (false, true) => None,
        (false, false) => Some(args.allow_host.clone()),
    }
}

pub fn run(args: Args, global: &Global) -> anyhow::Result<ExitCode> {
    let token = token(args.token.as_deref())?;
    if !(1..=MAX_BODY_MIB).contains(&args.max_body_mib) {
        anyhow::bail!(
            "--max-body-mib must be from 1 to {MAX_BODY_MIB}, not {}",
            args.max_body_mib
        );
    }
    if !args.host.is_loopback() && token.is_none() {
        anyhow::bail!(
            "refusing to bind {} without a token: pass --token (or MASLENS_TOKEN), or bind a loopback address",
            args.host
        );
    }
    let url = crate::db::url_or_default(args.db.as_deref())?;
    let config = ServeConfig {
        token,
        allowed_hosts: allowed_hosts(&args),
        trusted_proxies: args.trusted_proxies.clone(),
        max_body_bytes: args.max_body_mib << 20,
        settle: secs(args.settle, "--settle")?,
        idle: secs(args.idle, "--idle")?,
        assembly_pace: pace(args.assembly_pace)?,
        lease: secs(args.job_lease, "--job-lease")?,
        job_timeout: match args.job_timeout {
            Some(t) => secs(t, "--job-timeout")?,
            None => secs((0.9 * args.job_lease).min(600.0), "--job-lease")?,
        },
        policy: match args.diagnose {
            DiagnoseArg::Off => Policy::Off,
            DiagnoseArg::Failed => Policy::Failed,
            DiagnoseArg::All => Policy::All,
        },
        on_arrival: args
            .on_arrival
            .iter()
            .map(|m| match m {
                MethodArg::Locate => JobMethod::Locate,
                MethodArg::Llm => JobMethod::Llm,
                MethodArg::Scan => JobMethod::Scan,
            })
            .collect(),
        model: args.llm.model()?,
        llm: args.llm.options()?,
        writeback: WriteBack {
            otlp_logs: args.otlp_export.clone(),
            phoenix: args.phoenix.clone(),
            phoenix_token: args.phoenix_token.clone(),
            timeout: secs(args.writeback_timeout, "--writeback-timeout")?,
        },
        ..ServeConfig::default()
    };
    let addr = SocketAddr::new(args.host, args.port);
    super::block_on(async move {
        let store = maslens_store::Store::open(&url).await?;
        let state = AppState::new(store, config)?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot bind {addr}"))?;
        let bound = listener.local_addr()?;
        crate::outln!("{}", maslens_server::serve::listening(bound, global.json));
        std::io::stdout().flush()?;
        let (tx, rx) = tokio::sync::watch::channel(false);
        let background = tokio::spawn(maslens_server::serve::background_with(
            state.clone(),
            rx,
            Some(Box::new(|r| {
                if let Some(m) = maslens_server::serve::pipeline::sweep_message(&r) {
                    eprintln!("{m}");
                }
            })),
        ));
        let router = maslens_server::serve::router(state);
        let shutdown = maslens_server::shutdown_signal();
        maslens_server::serve(listener, router, shutdown)
            .await
            .context("server failed")?;
        let _ = tx.send(true);
        let _ = background.await;
        Ok::<_, anyhow::Error>(())
    })??;
    Ok(ExitCode::from(super::EXIT_OK))
}
