//! Controller bring-up, namespaces, failure state and shutdown.
//!
//! [`NvmeController::new`] takes a controller from whatever state it is in to
//! enabled (NVMe 1.4 §7.6.1): disable and wait for not-ready, program the admin
//! queue, enable and wait for ready (both bounded by CAP.TO), Identify the
//! controller and its active namespaces, and ask for I/O queues (Set Features,
//! Number of Queues). Each namespace is a [`NvmeNamespace`], a
//! [`BlockDevice`]; each of its `open_queue()` calls creates one hardware I/O
//! queue pair. When the last handle goes, the controller is shut down (CC.SHN).
//!
//! Failure is one-way: fatal status (CSTS.CFS), a device that stops answering or
//! is hot-unplugged, or a protocol violation marks the controller failed, stops
//! its DMA, and from then on every queue fails its I/O with
//! `BlockError::Failed` and `check()` reports the reason. Recovery by controller
//! reset is not attempted: the drive is failed and the layers above repair from
//! redundancy.

#![deny(unsafe_code)]

use crate::admin::AdminQueue;
use crate::device::DeviceAccess;
use crate::hw::pool::DmaPool;
use crate::qpair::NvmeQueuePair;
use crate::spec::{self, admin, cc, cns, csts, feature, reg, Cap, IdentifyController, PAGE};
use crate::{NvmeError, Result};
use cairn_blockdev::{BlockDevice, BlockError, DeviceIdentity, DeviceInfo, DmaBuf, QueuePair};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Tunables of the driver.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// Entries of each I/O submission (and completion) queue; at most
    /// `entries - 1` commands are in flight per queue pair.
    pub io_queue_entries: u16,
    /// Entries of the admin queues.
    pub admin_queue_entries: u16,
    /// I/O queues to ask the controller for.
    pub max_io_queues: u16,
    /// A command not completed in this time is aborted; one not completed this
    /// long after the abort is declared lost.
    pub io_timeout: Duration,
    /// Deadline of each admin command.
    pub admin_timeout: Duration,
    /// Upper bound of one command's transfer (the controller's MDTS may lower it).
    pub max_transfer: usize,
    /// Bytes of DMA memory each pool (one per queue pair, one per controller) may map.
    pub pool_limit: usize,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            io_queue_entries: 256,
            admin_queue_entries: 32,
            max_io_queues: 64,
            io_timeout: Duration::from_secs(30),
            admin_timeout: Duration::from_secs(10),
            max_transfer: 2 << 20,
            pool_limit: 1 << 30,
        }
    }
}

/// A namespace the driver can use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub nsid: u32,
    /// Logical block size (512 or 4096 ... any power of two from 512 to 4096).
    pub lba_size: u32,
    /// Size in logical blocks.
    pub blocks: u64,
}

/// State shared by a controller, its namespaces and its queue pairs. The I/O path
/// reads only `failed` (a flag written once); everything else behind a mutex is
/// for bring-up, queue creation and error handling.
#[derive(Debug)]
pub(crate) struct Shared {
    pub name: String,
    pub cap: Cap,
    pub id: IdentifyController,
    pub config: DriverConfig,
    pub max_transfer: usize,
    pub io_queues: u16,
    pub namespaces: Vec<NamespaceInfo>,
    pub pool: DmaPool,
    admin: Mutex<AdminQueue>,
    qids: Mutex<Vec<bool>>,
    failed: AtomicBool,
    reason: Mutex<Option<String>>,
    /// Buffers copied through a pool buffer because the caller's was not DMA-able.
    pub bounces: AtomicU64,
    /// Last field: dropped after the admin queue and the pool have unmapped their
    /// DMA memory (closing a VFIO device tears its IOMMU mappings down).
    pub dev: Arc<dyn DeviceAccess>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn is_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Why the controller failed ("" while it has not).
    pub fn failure(&self) -> String {
        lock(&self.reason).clone().unwrap_or_default()
    }

    /// Marks the controller failed (first reason wins), stops its DMA and, when
    /// the platform wants the device back, lets go of it.
    pub fn fail(&self, why: &str) {
        {
            let mut r = lock(&self.reason);
            if r.is_some() {
                return;
            }
            *r = Some(why.to_string());
        }
        self.failed.store(true, Ordering::Release);
        tracing::error!(ctrl = %self.name, "controller failed: {why}");
        self.dev.quiesce();
        if self.dev.removal_requested() {
            self.dev.release();
        }
    }

    /// The failure as the block layer's error.
    pub fn failed_error(&self) -> BlockError {
        BlockError::Failed(format!("{}: {}", self.name, self.failure()))
    }

    /// Looks at the controller's health: a pending removal, a register window
    /// that reads all ones, fatal status, or a controller no longer ready all
    /// fail it. Costs one register read.
    pub fn check_status(&self) -> std::result::Result<(), BlockError> {
        if self.is_failed() {
            return Err(self.failed_error());
        }
        if self.dev.removal_requested() {
            self.fail("the device is being removed (hot unplug)");
            return Err(self.failed_error());
        }
        let st = self.dev.read32(reg::CSTS);
        if st == u32::MAX {
            self.fail("not responding (registers read all ones: removed or dead)");
        } else if st & csts::CFS != 0 {
            self.fail("controller fatal status (CSTS.CFS)");
        } else if st & csts::RDY == 0 {
            self.fail("controller is no longer ready (reset behind our back?)");
        }
        if self.is_failed() {
            return Err(self.failed_error());
        }
        Ok(())
    }

    /// Runs an admin command.
    pub fn admin(&self, cmd: spec::Command, what: &str) -> Result<spec::Completion> {
        if self.is_failed() {
            return Err(NvmeError::Failed(self.name.clone(), self.failure()));
        }
        let r = lock(&self.admin).execute(self.dev.as_ref(), cmd, what, self.config.admin_timeout);
        if let Err(NvmeError::Failed(_, why) | NvmeError::Protocol(_, why)) = &r {
            self.fail(why);
        }
        r
    }

    /// Reserves an I/O queue id.
    pub fn take_qid(&self) -> Result<u16> {
        let mut q = lock(&self.qids);
        let i = q
            .iter()
            .position(|used| !used)
            .ok_or_else(|| NvmeError::NoQueue(self.name.clone(), self.io_queues))?;
        q[i] = true;
        Ok(i as u16 + 1)
    }

    pub fn put_qid(&self, qid: u16) {
        if let Some(u) = lock(&self.qids).get_mut(qid as usize - 1) {
            *u = false;
        }
    }

    pub fn stride(&self) -> usize {
        self.cap.doorbell_stride()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.is_failed() {
            return;
        }
        // Normal shutdown: the controller flushes its volatile cache and reports
        // shutdown complete (bounded by CAP.TO).
        let ccv = self.dev.read32(reg::CC);
        self.dev
            .write32(reg::CC, (ccv & !cc::SHN_MASK) | cc::SHN_NORMAL);
        let deadline = Instant::now() + Duration::from_millis(self.cap.timeout_ms());
        loop {
            let st = self.dev.read32(reg::CSTS);
            if st != u32::MAX && st & csts::SHST_MASK == csts::SHST_COMPLETE {
                tracing::debug!(ctrl = %self.name, "shutdown complete");
                break;
            }
            if st == u32::MAX || Instant::now() >= deadline {
                tracing::warn!(ctrl = %self.name, "shutdown did not complete in CAP.TO");
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// Waits until `CSTS.RDY == ready`, bounded by CAP.TO.
fn wait_ready(dev: &dyn DeviceAccess, cap: Cap, ready: bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_millis(cap.timeout_ms());
    loop {
        let st = dev.read32(reg::CSTS);
        if st == u32::MAX {
            return Err(NvmeError::Failed(
                dev.name().to_string(),
                "not responding (registers read all ones)".into(),
            ));
        }
        if ready && st & csts::CFS != 0 {
            return Err(NvmeError::Failed(
                dev.name().to_string(),
                "controller fatal status while enabling".into(),
            ));
        }
        if (st & csts::RDY != 0) == ready {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(NvmeError::Timeout(
                dev.name().to_string(),
                format!(
                    "CSTS.RDY did not become {} within CAP.TO ({} ms)",
                    ready as u8,
                    cap.timeout_ms()
                ),
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// An enabled NVMe controller.
#[derive(Debug, Clone)]
pub struct NvmeController {
    shared: Arc<Shared>,
}

impl NvmeController {
    /// Resets and enables the controller behind `dev`, identifies it and its
    /// namespaces, and negotiates I/O queues.
    pub fn new(dev: Arc<dyn DeviceAccess>, config: DriverConfig) -> Result<Self> {
        let name = dev.name().to_string();
        let unsupported = |m: String| NvmeError::Unsupported(name.clone(), m);
        let cap = Cap(dev.read64(reg::CAP));
        if cap.0 == u64::MAX {
            return Err(NvmeError::Failed(
                name,
                "not responding (CAP reads all ones)".into(),
            ));
        }
        if !cap.nvm_command_set() {
            return Err(unsupported("no NVM command set".into()));
        }
        if cap.mpsmin() != 0 {
            return Err(unsupported(format!(
                "minimum page size {} KiB (4 KiB needed)",
                4u32 << cap.mpsmin()
            )));
        }
        let stride = cap.doorbell_stride();
        let admin_doorbells = crate::queue::doorbell(0, true, stride) + 4;
        if dev.bar0_len() < admin_doorbells {
            return Err(unsupported(format!(
                "BAR0 of {} bytes has no room for doorbells",
                dev.bar0_len()
            )));
        }

        // Disable (a controller left enabled by firmware or a previous run).
        let ccv = dev.read32(reg::CC);
        if ccv & cc::EN != 0 {
            dev.write32(reg::CC, ccv & !cc::EN);
        }
        wait_ready(dev.as_ref(), cap, false)?;

        let entries = config
            .admin_queue_entries
            .min(cap.mqes().min(4096) as u16)
            .max(2);
        let mut aq = AdminQueue::new(dev.as_ref(), entries, stride)?;
        let n = (aq.entries() - 1) as u32;
        dev.write32(reg::AQA, n << 16 | n);
        dev.write64(reg::ASQ, aq.sq_iova());
        dev.write64(reg::ACQ, aq.cq_iova());
        dev.write32(reg::INTMS, u32::MAX); // we poll
        dev.write32(reg::CC, cc::EN | cc::IO_QUEUE_SIZES);
        wait_ready(dev.as_ref(), cap, true)?;

        let t = config.admin_timeout;
        let id = IdentifyController::parse(&aq.identify(dev.as_ref(), cns::CONTROLLER, 0, t)?)
            .map_err(|e| unsupported(e.to_string()))?;
        if id.sqes & 0xf > 6 || id.sqes >> 4 < 6 || id.cqes & 0xf > 4 || id.cqes >> 4 < 4 {
            return Err(unsupported(format!(
                "queue entry sizes SQES {:#x} CQES {:#x} (64/16 bytes needed)",
                id.sqes, id.cqes
            )));
        }

        // Number of Queues (0-based both ways); the answer may be more or less.
        let want = config.max_io_queues.max(1);
        let mut c = spec::Command::new(admin::SET_FEATURES);
        c.cdw10 = feature::NUMBER_OF_QUEUES;
        c.cdw11 = (want as u32 - 1) << 16 | (want as u32 - 1);
        let r = aq.execute(dev.as_ref(), c, "set features (number of queues)", t)?;
        let granted = ((r.dw0 & 0xffff) + 1).min((r.dw0 >> 16) + 1);
        let by_bar = ((dev.bar0_len() - spec::reg::DOORBELLS) / (2 * stride)).saturating_sub(1);
        let io_queues = (granted as usize)
            .min(want as usize)
            .min(by_bar)
            .min(u16::MAX as usize - 1) as u16;
        if io_queues == 0 {
            return Err(unsupported("the controller grants no I/O queue".into()));
        }

        let namespaces = identify_namespaces(&mut aq, dev.as_ref(), &id, t)?;
        let max_transfer = match id.mdts {
            0 => config.max_transfer,
            m if m >= 20 => config.max_transfer,
            m => (PAGE << m).min(config.max_transfer),
        }
        .max(PAGE)
            / PAGE
            * PAGE;

        let dev2 = dev.clone();
        let pool = DmaPool::new(
            format!("{name} (controller)"),
            dev.dma_domain(),
            config.pool_limit,
            Arc::new(move |len| dev2.alloc_dma(len)),
        );
        tracing::info!(
            ctrl = %name,
            model = %id.model,
            serial = %id.serial,
            namespaces = namespaces.len(),
            io_queues,
            max_transfer,
            "NVMe controller enabled"
        );
        Ok(NvmeController {
            shared: Arc::new(Shared {
                dev,
                name,
                cap,
                id,
                config,
                max_transfer,
                io_queues,
                namespaces,
                pool,
                admin: Mutex::new(aq),
                qids: Mutex::new(vec![false; io_queues as usize]),
                failed: AtomicBool::new(false),
                reason: Mutex::new(None),
                bounces: AtomicU64::new(0),
            }),
        })
    }

    /// Identify Controller data.
    pub fn identify(&self) -> &IdentifyController {
        &self.shared.id
    }

    /// Usable namespaces.
    pub fn namespaces(&self) -> &[NamespaceInfo] {
        &self.shared.namespaces
    }

    /// I/O queue pairs the controller granted.
    pub fn io_queues(&self) -> u16 {
        self.shared.io_queues
    }

    /// Largest transfer of one command (MDTS and the driver's own bound).
    pub fn max_transfer(&self) -> usize {
        self.shared.max_transfer
    }

    /// How many I/O buffers were copied because they were not from this
    /// controller's DMA pools (the chunk store's never are).
    pub fn bounced_buffers(&self) -> u64 {
        self.shared.bounces.load(Ordering::Relaxed)
    }

    /// Why the controller failed, if it did.
    pub fn failed(&self) -> Option<String> {
        self.shared.is_failed().then(|| self.shared.failure())
    }

    /// Checks the controller's health now (see [`BlockDevice::check`]).
    pub fn check(&self) -> std::result::Result<(), BlockError> {
        self.shared.check_status()
    }

    /// The block device of namespace `nsid`.
    pub fn namespace(&self, nsid: u32) -> Result<NvmeNamespace> {
        let ns = self
            .shared
            .namespaces
            .iter()
            .find(|n| n.nsid == nsid)
            .cloned()
            .ok_or_else(|| {
                NvmeError::Invalid(format!("{}: no usable namespace {nsid}", self.shared.name))
            })?;
        Ok(NvmeNamespace {
            shared: self.shared.clone(),
            ns,
        })
    }
}

fn identify_namespaces(
    aq: &mut AdminQueue,
    dev: &dyn DeviceAccess,
    id: &IdentifyController,
    t: Duration,
) -> Result<Vec<NamespaceInfo>> {
    // The active namespace list exists since NVMe 1.1; fall back to probing 1..=NN.
    let nsids = match aq.identify(dev, cns::ACTIVE_NAMESPACES, 0, t) {
        Ok(page) => spec::parse_namespace_list(&page),
        Err(NvmeError::Command { .. }) => (1..=id.nn.min(1024)).collect(),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for nsid in nsids {
        let page = aq.identify(dev, cns::NAMESPACE, nsid, t)?;
        let Ok(ns) = spec::IdentifyNamespace::parse(&page) else {
            continue;
        };
        if ns.nsze == 0 {
            continue; // inactive
        }
        match ns.format() {
            // The byte size must fit in a u64 (a garbage NSZE must not overflow).
            Some(f)
                if f.ms == 0
                    && (9..=12).contains(&f.lbads)
                    && ns.nsze.checked_mul(1 << f.lbads).is_some() =>
            {
                out.push(NamespaceInfo {
                    nsid,
                    lba_size: 1 << f.lbads,
                    blocks: ns.nsze,
                })
            }
            f => tracing::warn!(
                ctrl = %dev.name(),
                nsid,
                nsze = ns.nsze,
                "namespace skipped: LBA format {f:?} unsupported (512 B to 4 KiB without metadata)"
            ),
        }
    }
    Ok(out)
}

/// One namespace of a controller: a [`BlockDevice`].
#[derive(Debug, Clone)]
pub struct NvmeNamespace {
    shared: Arc<Shared>,
    ns: NamespaceInfo,
}

impl NvmeNamespace {
    pub fn nsid(&self) -> u32 {
        self.ns.nsid
    }

    pub fn lba_size(&self) -> u32 {
        self.ns.lba_size
    }

    /// The controller this namespace belongs to.
    pub fn controller(&self) -> NvmeController {
        NvmeController {
            shared: self.shared.clone(),
        }
    }

    /// Opens a hardware I/O queue pair on this namespace.
    pub fn open_nvme_queue(&self) -> Result<NvmeQueuePair> {
        NvmeQueuePair::new(self.shared.clone(), self.ns.clone())
    }
}

impl BlockDevice for NvmeNamespace {
    fn info(&self) -> DeviceInfo {
        let location = format!("{}/ns{}", self.shared.name, self.ns.nsid);
        let id = &self.shared.id;
        DeviceInfo {
            block_size: self.ns.lba_size,
            num_blocks: self.ns.blocks,
            name: format!("nvme:{location}"),
            backend: "nvme",
            location,
            // Identify data is whatever the controller wrote: cleaned for display.
            identity: DeviceIdentity {
                model: DeviceIdentity::clean(&id.model),
                serial: DeviceIdentity::clean(&id.serial),
                firmware: DeviceIdentity::clean(&id.firmware),
            },
        }
    }

    fn open_queue(&self) -> std::result::Result<Box<dyn QueuePair>, BlockError> {
        Ok(Box::new(self.open_nvme_queue()?))
    }

    fn check(&self) -> std::result::Result<(), BlockError> {
        self.shared.check_status()
    }

    fn alloc_buf(&self, len: usize) -> std::result::Result<DmaBuf, BlockError> {
        Ok(self.shared.pool.alloc(len)?)
    }
}
