//! The parts of the NVMe 1.4 specification the driver and the emulator speak:
//! controller registers, submission and completion queue entries, opcodes, status
//! codes and the Identify data structures.
//!
//! Everything here is plain data; parsers are total functions over byte slices
//! (a short or garbage structure from a device gives an error, never a panic).

#![deny(unsafe_code)]

use std::fmt;

/// Controller register offsets in BAR0 (NVMe 1.4 §3.1).
pub mod reg {
    /// Controller Capabilities (64 bit).
    pub const CAP: usize = 0x00;
    /// Version.
    pub const VS: usize = 0x08;
    /// Interrupt Mask Set.
    pub const INTMS: usize = 0x0c;
    /// Controller Configuration.
    pub const CC: usize = 0x14;
    /// Controller Status.
    pub const CSTS: usize = 0x1c;
    /// Admin Queue Attributes.
    pub const AQA: usize = 0x24;
    /// Admin Submission Queue base (64 bit).
    pub const ASQ: usize = 0x28;
    /// Admin Completion Queue base (64 bit).
    pub const ACQ: usize = 0x30;
    /// First doorbell (SQ 0 tail).
    pub const DOORBELLS: usize = 0x1000;
}

/// Memory page size the driver configures (CC.MPS = 0): PRP entries address
/// pages of this size.
pub const PAGE: usize = 4096;
/// Size of a submission queue entry (CC.IOSQES = 6).
pub const SQE_SIZE: usize = 64;
/// Size of a completion queue entry (CC.IOCQES = 4).
pub const CQE_SIZE: usize = 16;

/// CAP, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap(pub u64);

impl Cap {
    /// Maximum queue entries supported (already 1-based).
    pub fn mqes(self) -> u32 {
        (self.0 & 0xffff) as u32 + 1
    }
    /// Worst-case time to become ready or not ready, in milliseconds (CAP.TO is in
    /// 500 ms units; 0 is treated as 500 ms).
    pub fn timeout_ms(self) -> u64 {
        ((self.0 >> 24) & 0xff).max(1) * 500
    }
    /// Doorbell stride in bytes (4 << DSTRD).
    pub fn doorbell_stride(self) -> usize {
        4usize << ((self.0 >> 32) & 0xf)
    }
    /// NVM command set supported (CSS bit 0 of the field at bit 37).
    pub fn nvm_command_set(self) -> bool {
        (self.0 >> 37) & 1 == 1
    }
    /// Minimum memory page size, 2^(12 + MPSMIN).
    pub fn mpsmin(self) -> u32 {
        ((self.0 >> 48) & 0xf) as u32
    }
    /// Encodes a CAP value (for the emulator).
    pub fn encode(mqes_1based: u32, timeout_500ms: u8, dstrd: u8) -> Cap {
        let mqes = (mqes_1based.clamp(2, 65536) - 1) as u64;
        Cap(mqes
            | 1 << 16 // CQR: queues must be physically contiguous
            | (timeout_500ms as u64) << 24
            | ((dstrd & 0xf) as u64) << 32
            | 1 << 37) // NVM command set; MPSMIN = MPSMAX = 0 (4 KiB)
    }
}

/// CC bits.
pub mod cc {
    pub const EN: u32 = 1;
    /// I/O SQ entry size 2^6 = 64, I/O CQ entry size 2^4 = 16; NVM command set; 4 KiB pages.
    pub const IO_QUEUE_SIZES: u32 = (6 << 16) | (4 << 20);
    pub const SHN_MASK: u32 = 3 << 14;
    pub const SHN_NORMAL: u32 = 1 << 14;
}

/// CSTS bits.
pub mod csts {
    pub const RDY: u32 = 1;
    pub const CFS: u32 = 1 << 1;
    pub const SHST_MASK: u32 = 3 << 2;
    pub const SHST_COMPLETE: u32 = 2 << 2;
}

/// Admin command opcodes.
pub mod admin {
    pub const DELETE_IO_SQ: u8 = 0x00;
    pub const CREATE_IO_SQ: u8 = 0x01;
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const DELETE_IO_CQ: u8 = 0x04;
    pub const CREATE_IO_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0a;
}

/// NVM command set opcodes.
pub mod nvm {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    /// CDW12 bit 30: Force Unit Access.
    pub const FUA: u32 = 1 << 30;
    /// CDW11 bit 2 of Dataset Management: deallocate.
    pub const DSM_DEALLOCATE: u32 = 1 << 2;
}

/// Identify CNS values.
pub mod cns {
    pub const NAMESPACE: u32 = 0x00;
    pub const CONTROLLER: u32 = 0x01;
    pub const ACTIVE_NAMESPACES: u32 = 0x02;
}

/// Feature identifiers.
pub mod feature {
    pub const NUMBER_OF_QUEUES: u32 = 0x07;
}

/// Optional NVM Command Support bits (Identify Controller ONCS).
pub mod oncs {
    pub const DATASET_MANAGEMENT: u16 = 1 << 2;
    pub const WRITE_ZEROES: u16 = 1 << 3;
}

/// A submission queue entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Command {
    pub opcode: u8,
    pub cid: u16,
    pub nsid: u32,
    pub prp1: u64,
    pub prp2: u64,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
}

impl Command {
    /// A command with only the opcode set (PSDT = 0: PRPs).
    pub fn new(opcode: u8) -> Self {
        Command {
            opcode,
            ..Default::default()
        }
    }

    /// The 64 bytes of the entry.
    pub fn encode(&self) -> [u8; SQE_SIZE] {
        let mut b = [0u8; SQE_SIZE];
        let cdw0 = self.opcode as u32 | (self.cid as u32) << 16;
        b[0..4].copy_from_slice(&cdw0.to_le_bytes());
        b[4..8].copy_from_slice(&self.nsid.to_le_bytes());
        b[24..32].copy_from_slice(&self.prp1.to_le_bytes());
        b[32..40].copy_from_slice(&self.prp2.to_le_bytes());
        for (i, v) in [
            self.cdw10, self.cdw11, self.cdw12, self.cdw13, self.cdw14, self.cdw15,
        ]
        .iter()
        .enumerate()
        {
            b[40 + 4 * i..44 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Decodes an entry (for the emulator).
    pub fn decode(b: &[u8; SQE_SIZE]) -> Self {
        let d = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let q = |o: usize| d(o) as u64 | (d(o + 4) as u64) << 32;
        let cdw0 = d(0);
        Command {
            opcode: cdw0 as u8,
            cid: (cdw0 >> 16) as u16,
            nsid: d(4),
            prp1: q(24),
            prp2: q(32),
            cdw10: d(40),
            cdw11: d(44),
            cdw12: d(48),
            cdw13: d(52),
            cdw14: d(56),
            cdw15: d(60),
        }
    }
}

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// Command specific result (DW0).
    pub dw0: u32,
    /// Submission queue head pointer at the time of completion.
    pub sq_head: u16,
    pub sq_id: u16,
    pub cid: u16,
    pub phase: bool,
    pub status: Status,
}

impl Completion {
    /// The 16 bytes of the entry.
    pub fn encode(&self) -> [u8; CQE_SIZE] {
        let mut b = [0u8; CQE_SIZE];
        b[0..4].copy_from_slice(&self.dw0.to_le_bytes());
        let dw2 = self.sq_head as u32 | (self.sq_id as u32) << 16;
        b[8..12].copy_from_slice(&dw2.to_le_bytes());
        let dw3 = self.cid as u32 | (self.phase as u32) << 16 | (self.status.0 as u32) << 17;
        b[12..16].copy_from_slice(&dw3.to_le_bytes());
        b
    }

    /// Decodes an entry.
    pub fn decode(b: &[u8; CQE_SIZE]) -> Self {
        let d = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let dw2 = d(8);
        let dw3 = d(12);
        Completion {
            dw0: d(0),
            sq_head: dw2 as u16,
            sq_id: (dw2 >> 16) as u16,
            cid: dw3 as u16,
            phase: (dw3 >> 16) & 1 == 1,
            status: Status((dw3 >> 17) as u16),
        }
    }
}

/// The 15-bit status field of a completion (SC, SCT, CRD, M, DNR).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Status(pub u16);

impl Status {
    pub const SUCCESS: Status = Status(0);

    /// A status from its type and code.
    pub const fn new(sct: u8, sc: u8) -> Status {
        Status((sc as u16) | ((sct as u16 & 7) << 8))
    }
    /// Status Code.
    pub fn sc(self) -> u8 {
        self.0 as u8
    }
    /// Status Code Type.
    pub fn sct(self) -> u8 {
        ((self.0 >> 8) & 7) as u8
    }
    /// Do Not Retry.
    pub fn dnr(self) -> bool {
        self.0 >> 14 & 1 == 1
    }
    pub fn is_success(self) -> bool {
        self.sct() == 0 && self.sc() == 0
    }
    fn name(self) -> &'static str {
        match (self.sct(), self.sc()) {
            (0, 0x00) => "success",
            (0, 0x01) => "invalid command opcode",
            (0, 0x02) => "invalid field in command",
            (0, 0x03) => "command id conflict",
            (0, 0x04) => "data transfer error",
            (0, 0x05) => "aborted due to power loss",
            (0, 0x06) => "internal error",
            (0, 0x07) => "command abort requested",
            (0, 0x08) => "aborted due to SQ deletion",
            (0, 0x0b) => "invalid namespace or format",
            (0, 0x80) => "LBA out of range",
            (0, 0x81) => "capacity exceeded",
            (0, 0x82) => "namespace not ready",
            (1, 0x00) => "completion queue invalid",
            (1, 0x01) => "invalid queue identifier",
            (1, 0x02) => "invalid queue size",
            (1, 0x03) => "abort command limit exceeded",
            (1, 0x08) => "invalid interrupt vector",
            (2, 0x80) => "write fault",
            (2, 0x81) => "unrecovered read error",
            (2, 0x86) => "access denied",
            _ => "unknown status",
        }
    }
}

/// Generic status codes used by the driver and the emulator.
pub mod sc {
    use super::Status;
    pub const INVALID_OPCODE: Status = Status::new(0, 0x01);
    pub const INVALID_FIELD: Status = Status::new(0, 0x02);
    pub const DATA_TRANSFER_ERROR: Status = Status::new(0, 0x04);
    pub const INTERNAL_ERROR: Status = Status::new(0, 0x06);
    pub const ABORT_REQUESTED: Status = Status::new(0, 0x07);
    pub const ABORTED_SQ_DELETION: Status = Status::new(0, 0x08);
    pub const INVALID_NAMESPACE: Status = Status::new(0, 0x0b);
    pub const LBA_OUT_OF_RANGE: Status = Status::new(0, 0x80);
    pub const INVALID_CQ: Status = Status::new(1, 0x00);
    pub const INVALID_QUEUE_ID: Status = Status::new(1, 0x01);
    pub const INVALID_QUEUE_SIZE: Status = Status::new(1, 0x02);
    pub const UNRECOVERED_READ_ERROR: Status = Status::new(2, 0x81);
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (SCT {:#x} SC {:#04x}{})",
            self.name(),
            self.sct(),
            self.sc(),
            if self.dnr() { ", do not retry" } else { "" }
        )
    }
}

/// Where a parser found a structure too short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("identify data of {0} bytes is too short")]
pub struct ShortData(pub usize);

fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
fn le64(b: &[u8], o: usize) -> u64 {
    le32(b, o) as u64 | (le32(b, o + 4) as u64) << 32
}
fn ascii(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .trim_end_matches(['\0', ' '])
        .to_string()
}

/// Identify Controller data (CNS 01h), the fields the driver uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdentifyController {
    pub vid: u16,
    pub serial: String,
    pub model: String,
    pub firmware: String,
    /// Maximum Data Transfer Size as a power of two of the minimum page size (0 = no limit).
    pub mdts: u8,
    pub cntlid: u16,
    pub version: u32,
    /// Abort Command Limit (0-based).
    pub acl: u8,
    /// Required and maximum SQ entry sizes (log2), from SQES.
    pub sqes: u8,
    pub cqes: u8,
    /// Number of namespaces.
    pub nn: u32,
    pub oncs: u16,
    /// Volatile Write Cache present.
    pub vwc: bool,
}

impl IdentifyController {
    pub const LEN: usize = 4096;

    pub fn parse(b: &[u8]) -> Result<Self, ShortData> {
        if b.len() < Self::LEN {
            return Err(ShortData(b.len()));
        }
        Ok(IdentifyController {
            vid: le16(b, 0),
            serial: ascii(&b[4..24]),
            model: ascii(&b[24..64]),
            firmware: ascii(&b[64..72]),
            mdts: b[77],
            cntlid: le16(b, 78),
            version: le32(b, 80),
            acl: b[258],
            sqes: b[512],
            cqes: b[513],
            nn: le32(b, 516),
            oncs: le16(b, 520),
            vwc: b[525] & 1 == 1,
        })
    }

    /// Encodes the fields this type knows into a 4 KiB page (for the emulator).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; Self::LEN];
        b[0..2].copy_from_slice(&self.vid.to_le_bytes());
        let put = |b: &mut [u8], s: &str, r: std::ops::Range<usize>| {
            let dst = &mut b[r];
            dst.fill(b' ');
            let n = s.len().min(dst.len());
            dst[..n].copy_from_slice(&s.as_bytes()[..n]);
        };
        put(&mut b, &self.serial, 4..24);
        put(&mut b, &self.model, 24..64);
        put(&mut b, &self.firmware, 64..72);
        b[77] = self.mdts;
        b[78..80].copy_from_slice(&self.cntlid.to_le_bytes());
        b[80..84].copy_from_slice(&self.version.to_le_bytes());
        b[258] = self.acl;
        b[512] = self.sqes;
        b[513] = self.cqes;
        b[516..520].copy_from_slice(&self.nn.to_le_bytes());
        b[520..522].copy_from_slice(&self.oncs.to_le_bytes());
        b[525] = self.vwc as u8;
        b
    }
}

/// One LBA format of a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbaFormat {
    /// Metadata bytes per LBA.
    pub ms: u16,
    /// LBA data size as a power of two.
    pub lbads: u8,
}

/// Identify Namespace data (CNS 00h), the fields the driver uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyNamespace {
    /// Size in logical blocks.
    pub nsze: u64,
    pub ncap: u64,
    /// Index of the LBA format in use.
    pub flbas: u8,
    pub lbaf: Vec<LbaFormat>,
}

impl IdentifyNamespace {
    pub const LEN: usize = 4096;

    pub fn parse(b: &[u8]) -> Result<Self, ShortData> {
        if b.len() < Self::LEN {
            return Err(ShortData(b.len()));
        }
        let nlbaf = (b[25] as usize + 1).min(16);
        let lbaf = (0..nlbaf)
            .map(|i| {
                let v = le32(b, 128 + 4 * i);
                LbaFormat {
                    ms: v as u16,
                    lbads: (v >> 16) as u8,
                }
            })
            .collect();
        Ok(IdentifyNamespace {
            nsze: le64(b, 0),
            ncap: le64(b, 8),
            flbas: b[26] & 0xf,
            lbaf,
        })
    }

    /// The LBA format in use, if the index names one.
    pub fn format(&self) -> Option<LbaFormat> {
        self.lbaf.get(self.flbas as usize).copied()
    }

    /// Encodes a namespace of `nsze` blocks of 2^lbads bytes (for the emulator).
    pub fn encode_simple(nsze: u64, lbads: u8) -> Vec<u8> {
        let mut b = vec![0u8; Self::LEN];
        b[0..8].copy_from_slice(&nsze.to_le_bytes());
        b[8..16].copy_from_slice(&nsze.to_le_bytes());
        b[16..24].copy_from_slice(&nsze.to_le_bytes());
        b[25] = 0; // one format
        b[26] = 0; // using format 0
        b[128..132].copy_from_slice(&((lbads as u32) << 16).to_le_bytes());
        b
    }
}

/// Parses an active namespace list (CNS 02h): ascending NSIDs, zero-terminated.
pub fn parse_namespace_list(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&n| n != 0)
        .collect()
}

/// One Dataset Management range (16 bytes).
pub fn encode_dsm_range(slba: u64, nlb: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[4..8].copy_from_slice(&nlb.to_le_bytes());
    b[8..16].copy_from_slice(&slba.to_le_bytes());
    b
}

/// Decodes a Dataset Management range into (slba, number of blocks).
pub fn decode_dsm_range(b: &[u8; 16]) -> (u64, u32) {
    (le64(b, 8), le32(b, 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_and_completion_roundtrip() {
        let c = Command {
            opcode: nvm::WRITE,
            cid: 0xbeef,
            nsid: 3,
            prp1: 0x1234_5000,
            prp2: 0xdead_b000,
            cdw10: 1,
            cdw11: 2,
            cdw12: 7 | nvm::FUA,
            ..Default::default()
        };
        let b = c.encode();
        assert_eq!(b[0], nvm::WRITE);
        assert_eq!(u16::from_le_bytes([b[2], b[3]]), 0xbeef);
        assert_eq!(Command::decode(&b), c);
        let e = Completion {
            dw0: 9,
            sq_head: 17,
            sq_id: 4,
            cid: 0xbeef,
            phase: true,
            status: sc::LBA_OUT_OF_RANGE,
        };
        let d = Completion::decode(&e.encode());
        assert_eq!(d, e);
        assert_eq!(d.status.sc(), 0x80);
        assert!(!d.status.is_success());
        assert!(d.status.to_string().contains("LBA out of range"));
    }

    #[test]
    fn cap_fields() {
        let c = Cap::encode(1024, 20, 0);
        assert_eq!(c.mqes(), 1024);
        assert_eq!(c.timeout_ms(), 10_000);
        assert_eq!(c.doorbell_stride(), 4);
        assert!(c.nvm_command_set());
        assert_eq!(c.mpsmin(), 0);
        assert_eq!(Cap(0).timeout_ms(), 500);
    }

    #[test]
    fn identify_parsers_are_total() {
        assert!(IdentifyController::parse(&[0; 100]).is_err());
        assert!(IdentifyNamespace::parse(&[]).is_err());
        let garbage = vec![0xffu8; 4096];
        let c = IdentifyController::parse(&garbage).unwrap();
        assert_eq!(c.mdts, 0xff);
        let n = IdentifyNamespace::parse(&garbage).unwrap();
        assert_eq!(n.lbaf.len(), 16);
        assert_eq!(n.flbas, 15);
        let id = IdentifyController {
            serial: "SN1".into(),
            model: "Cairn emulated".into(),
            mdts: 5,
            nn: 2,
            oncs: oncs::WRITE_ZEROES,
            ..Default::default()
        };
        assert_eq!(IdentifyController::parse(&id.encode()).unwrap(), id);
        let ns = IdentifyNamespace::parse(&IdentifyNamespace::encode_simple(1000, 9)).unwrap();
        assert_eq!(ns.nsze, 1000);
        assert_eq!(ns.format(), Some(LbaFormat { ms: 0, lbads: 9 }));
        let mut list = vec![0u8; 4096];
        list[0] = 1;
        list[4] = 5;
        assert_eq!(parse_namespace_list(&list), vec![1, 5]);
        let r = encode_dsm_range(77, 8);
        assert_eq!(decode_dsm_range(&r), (77, 8));
    }
}
