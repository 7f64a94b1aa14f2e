//! The crate's one error type.

#![deny(unsafe_code)]

use crate::spec::Status;
use cairn_blockdev::BlockError;

/// Errors of the NVMe driver, its device access backends and the emulator.
#[derive(Debug, thiserror::Error)]
pub enum NvmeError {
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// VFIO refused or lacks something the driver needs.
    #[error("VFIO: {0}")]
    Vfio(String),
    /// A PCI address that does not parse.
    #[error("bad PCI address {0:?} (expected DDDD:BB:DD.F)")]
    BadAddress(String),
    /// A drive specification that does not parse.
    #[error("bad NVMe drive {0:?}: {1}")]
    BadDrive(String, String),
    /// The controller is not one this driver can drive.
    #[error("{0}: unsupported controller: {1}")]
    Unsupported(String, String),
    /// A command completed with an error status.
    #[error("{ctrl}: {what} failed: {status}")]
    Command {
        ctrl: String,
        what: String,
        status: Status,
    },
    /// Something the controller should have done in bounded time did not happen.
    #[error("{0}: timed out: {1}")]
    Timeout(String, String),
    /// The controller is failed (fatal status, removed, or broken); it serves nothing more.
    #[error("{0}: controller failed: {1}")]
    Failed(String, String),
    /// The controller returned data that breaks the protocol (bad command id, queue
    /// id or head pointer); the controller is failed with this reason.
    #[error("{0}: protocol violation by the controller: {1}")]
    Protocol(String, String),
    /// DMA memory could not be allocated or mapped.
    #[error("DMA memory: {0}")]
    Dma(String),
    /// A request the driver refuses (misaligned, out of range, unknown namespace).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// No free I/O queue id on the controller.
    #[error("{0}: no I/O queue left (the controller granted {1})")]
    NoQueue(String, u16),
    /// Moving a function to vfio-pci (or back) failed.
    #[error("{0}")]
    Bind(#[from] cairn_sysutil::pci::PciError),
    /// A sysfs read of the controller discovery failed.
    #[error("sysfs {path}: {source}")]
    Sysfs {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl NvmeError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        NvmeError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result of this crate.
pub type Result<T, E = NvmeError> = std::result::Result<T, E>;

impl From<NvmeError> for BlockError {
    fn from(e: NvmeError) -> Self {
        match e {
            NvmeError::Failed(..) | NvmeError::Protocol(..) => BlockError::Failed(e.to_string()),
            NvmeError::Invalid(m) => BlockError::Invalid(m),
            NvmeError::Dma(m) => BlockError::Io {
                context: "DMA pool".into(),
                source: std::io::Error::new(std::io::ErrorKind::OutOfMemory, m),
            },
            NvmeError::Timeout(..) => BlockError::Io {
                context: "nvme".into(),
                source: std::io::Error::new(std::io::ErrorKind::TimedOut, e.to_string()),
            },
            NvmeError::Io { context, source } => BlockError::Io { context, source },
            other => BlockError::Io {
                context: "nvme".into(),
                source: std::io::Error::other(other.to_string()),
            },
        }
    }
}
