//! The end-to-end tests, one binary: the real daemons (mgmtd, datapathd, nodectl)
//! started per test, driven by real clients. One binary links the AWS SDK and the
//! daemons' crates once, where a binary per file linked them 31 times; `cargo test
//! -p cairn-it --test e2e nfs::` runs one module.

mod admin_access;
mod admin_tls;
mod bad_input;
mod bmc;
mod devup;
mod drives;
mod faults;
mod gc;
mod kv;
mod metrics;
mod nfs;
mod nfs_exports;
mod nfs_faults;
mod page;
mod qos;
mod repair;
mod replication;
mod resp;
mod s3_addressing;
mod s3_api;
mod s3_checksums;
mod s3_conformance;
mod s3_lifecycle;
mod s3_object_lock;
mod s3_requests;
mod s3_tagging_cors;
mod s3_versioning;
mod scrub;
mod sealing;
mod slow_clients;
mod snapshots;
mod space;
mod ssh;
mod tenants;
mod upgrade;
