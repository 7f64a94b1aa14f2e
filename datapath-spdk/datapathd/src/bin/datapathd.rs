//! datapathd: see the cairn-datapath crate.

use clap::Parser;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cfg = cairn_datapath::Config::parse();
    if let Err(e) = cairn_datapath::run(cfg) {
        tracing::error!("datapathd: {e}");
        eprintln!("datapathd: {e}");
        std::process::exit(1);
    }
}
