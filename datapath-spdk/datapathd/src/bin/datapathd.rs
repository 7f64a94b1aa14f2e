//! datapathd: see the cairn-datapath crate.

use clap::Parser;

fn main() {
    cairn_sysutil::logging::init("info");
    let cfg = cairn_datapath::Config::parse();
    if let Err(e) = cairn_datapath::run(cfg) {
        tracing::error!("datapathd: {e}");
        eprintln!("datapathd: {e}");
        std::process::exit(1);
    }
}
