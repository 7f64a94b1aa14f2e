//! VFIO (type1 IOMMU): container, group and device; PCI config space; BAR0; DMA
//! mappings; the device request notification used for hot unplug.
//!
//! One container per controller, so each controller has its own IOVA space
//! ([`DmaDomain`]). Two functions in one IOMMU group are not supported (the group
//! would have to share the container): the second open fails with a clear error.

use super::{Backing, Bar, DmaRegion, EventFd, IommuUnmap};
use crate::device::DeviceAccess;
use crate::sysfs::Bdf;
use crate::{NvmeError, Result};
use cairn_blockdev::DmaDomain;
use std::ffi::CString;
use std::fs::OpenOptions;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use vfio_bindings::bindings::vfio as vb;

/// VFIO ioctls are all `_IO(VFIO_TYPE, VFIO_BASE + n)`.
const fn vfio_ioctl(n: u32) -> u32 {
    (vb::VFIO_TYPE as u32) << 8 | (vb::VFIO_BASE + n)
}
const VFIO_GET_API_VERSION: u32 = vfio_ioctl(0);
const VFIO_CHECK_EXTENSION: u32 = vfio_ioctl(1);
const VFIO_SET_IOMMU: u32 = vfio_ioctl(2);
const VFIO_GROUP_GET_STATUS: u32 = vfio_ioctl(3);
const VFIO_GROUP_SET_CONTAINER: u32 = vfio_ioctl(4);
const VFIO_GROUP_GET_DEVICE_FD: u32 = vfio_ioctl(6);
const VFIO_DEVICE_GET_REGION_INFO: u32 = vfio_ioctl(8);
const VFIO_DEVICE_GET_IRQ_INFO: u32 = vfio_ioctl(9);
const VFIO_DEVICE_SET_IRQS: u32 = vfio_ioctl(10);
const VFIO_IOMMU_MAP_DMA: u32 = vfio_ioctl(13);
const VFIO_IOMMU_UNMAP_DMA: u32 = vfio_ioctl(14);

/// PCI command register and its bits.
const PCI_COMMAND: u64 = 0x04;
const PCI_COMMAND_MEMORY: u16 = 1 << 1;
const PCI_COMMAND_MASTER: u16 = 1 << 2;
const PCI_COMMAND_INTX_DISABLE: u16 = 1 << 10;

/// First IOVA handed out: above 4 GiB keeps clear of the x86 MSI window
/// (0xfee00000) and of low reserved ranges.
const IOVA_BASE: u64 = 1 << 32;

fn last_err(ctx: &str) -> NvmeError {
    NvmeError::io(ctx.to_string(), std::io::Error::last_os_error())
}

/// `ioctl(fd, req)` with no argument.
fn ioctl_none(fd: i32, req: u32, arg: libc::c_ulong) -> Result<i32> {
    // SAFETY: these requests (GET_API_VERSION, CHECK_EXTENSION, SET_IOMMU) take an
    // integer argument by value, not a pointer.
    let rc = unsafe { libc::ioctl(fd, req as _, arg) };
    if rc < 0 {
        return Err(last_err("VFIO ioctl"));
    }
    Ok(rc)
}

/// `ioctl(fd, req, &mut T)`.
fn ioctl_ptr<T>(fd: i32, req: u32, arg: &mut T, what: &str) -> Result<i32> {
    // SAFETY: `arg` is a live, exclusively borrowed #[repr(C)] struct of the layout
    // the request expects (from vfio-bindings, with argsz set by the caller), so
    // the kernel reads and writes within it.
    let rc = unsafe { libc::ioctl(fd, req as _, arg as *mut T) };
    if rc < 0 {
        return Err(last_err(what));
    }
    Ok(rc)
}

fn argsz<T>() -> u32 {
    std::mem::size_of::<T>() as u32
}

/// A VFIO container with a type1 IOMMU: the IOVA space of one controller.
#[derive(Debug)]
struct Container {
    fd: OwnedFd,
    next_iova: Mutex<u64>,
}

impl Container {
    fn map(&self, vaddr: u64, len: usize) -> Result<u64> {
        let mut next = self.next_iova.lock().unwrap_or_else(|e| e.into_inner());
        let iova = *next;
        let mut m = vb::vfio_iommu_type1_dma_map {
            argsz: argsz::<vb::vfio_iommu_type1_dma_map>(),
            flags: vb::VFIO_DMA_MAP_FLAG_READ | vb::VFIO_DMA_MAP_FLAG_WRITE,
            vaddr,
            iova,
            size: len as u64,
        };
        ioctl_ptr(
            self.fd.as_raw_fd(),
            VFIO_IOMMU_MAP_DMA,
            &mut m,
            "VFIO_IOMMU_MAP_DMA",
        )?;
        // Keep a 2 MiB aligned, gapped layout: a stray PRP past a buffer's end
        // faults in the IOMMU instead of reaching a neighbour.
        *next =
            (iova + len as u64 + super::HUGE_PAGE as u64).next_multiple_of(super::HUGE_PAGE as u64);
        Ok(iova)
    }
}

impl IommuUnmap for Container {
    fn unmap(&self, iova: u64, len: usize) {
        let mut u = vb::vfio_iommu_type1_dma_unmap {
            argsz: argsz::<vb::vfio_iommu_type1_dma_unmap>(),
            flags: 0,
            iova,
            size: len as u64,
            data: Default::default(),
        };
        if let Err(e) = ioctl_ptr(
            self.fd.as_raw_fd(),
            VFIO_IOMMU_UNMAP_DMA,
            &mut u,
            "VFIO_IOMMU_UNMAP_DMA",
        ) {
            tracing::warn!("unmapping IOVA {iova:#x}+{len}: {e}");
        }
    }
}

#[repr(C)]
struct IrqSetEventfd {
    hdr: vb::vfio_irq_set,
    fd: i32,
}

/// An NVMe controller's PCI function bound to vfio-pci.
#[derive(Debug)]
pub struct VfioDevice {
    name: String,
    container: Arc<Container>,
    _group: OwnedFd,
    /// The device descriptor; `None` once released (hot unplug).
    device: Mutex<Option<OwnedFd>>,
    config_offset: u64,
    bar: Bar,
    request: Option<EventFd>,
    removed: AtomicBool,
    domain: DmaDomain,
}

impl VfioDevice {
    /// Opens the function at `bdf` (already bound to vfio-pci), enables memory
    /// space and bus mastering, maps BAR0 and registers for removal requests.
    /// `sysfs` is normally `/sys`.
    pub fn open(bdf: &Bdf, sysfs: &Path) -> Result<Self> {
        let name = bdf.to_string();
        let vfio_err = |m: String| NvmeError::Vfio(format!("{name}: {m}"));
        let group_link = sysfs.join(format!("bus/pci/devices/{name}/iommu_group"));
        let group_no = std::fs::read_link(&group_link)
            .map_err(|e| {
                vfio_err(format!(
                    "no IOMMU group ({}: {e}); boot with intel_iommu=on and bind it to vfio-pci",
                    group_link.display()
                ))
            })?
            .file_name()
            .and_then(|s| s.to_str())
            .map(str::to_string)
            .ok_or_else(|| vfio_err("unreadable IOMMU group link".into()))?;

        let open = |p: &str| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .map(OwnedFd::from)
                .map_err(|e| NvmeError::io(format!("open {p}"), e))
        };
        let container = open("/dev/vfio/vfio")?;
        let cfd = container.as_raw_fd();
        if ioctl_none(cfd, VFIO_GET_API_VERSION, 0)? != vb::VFIO_API_VERSION as i32 {
            return Err(vfio_err("unknown VFIO API version".into()));
        }
        let iommu = if ioctl_none(cfd, VFIO_CHECK_EXTENSION, vb::VFIO_TYPE1v2_IOMMU as _)? == 1 {
            vb::VFIO_TYPE1v2_IOMMU
        } else if ioctl_none(cfd, VFIO_CHECK_EXTENSION, vb::VFIO_TYPE1_IOMMU as _)? == 1 {
            vb::VFIO_TYPE1_IOMMU
        } else {
            return Err(vfio_err("the kernel offers no type1 IOMMU".into()));
        };

        let group = open(&format!("/dev/vfio/{group_no}")).map_err(|e| {
            vfio_err(format!(
                "{e} (is {name} bound to vfio-pci and the group free?)"
            ))
        })?;
        let gfd = group.as_raw_fd();
        let mut status = vb::vfio_group_status {
            argsz: argsz::<vb::vfio_group_status>(),
            flags: 0,
        };
        ioctl_ptr(
            gfd,
            VFIO_GROUP_GET_STATUS,
            &mut status,
            "VFIO_GROUP_GET_STATUS",
        )?;
        if status.flags & vb::VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(vfio_err(format!(
                "IOMMU group {group_no} is not viable (bind every function of the group to vfio-pci)"
            )));
        }
        let mut cfd_arg = cfd;
        ioctl_ptr(
            gfd,
            VFIO_GROUP_SET_CONTAINER,
            &mut cfd_arg,
            "VFIO_GROUP_SET_CONTAINER",
        )?;
        ioctl_none(cfd, VFIO_SET_IOMMU, iommu as _)?;

        let cname = CString::new(name.clone()).map_err(|_| NvmeError::BadAddress(name.clone()))?;
        // SAFETY: the argument is a NUL-terminated string that lives across the call.
        let dfd = unsafe { libc::ioctl(gfd, VFIO_GROUP_GET_DEVICE_FD as _, cname.as_ptr()) };
        if dfd < 0 {
            return Err(last_err("VFIO_GROUP_GET_DEVICE_FD"));
        }
        // SAFETY: dfd is a fresh descriptor returned to us alone.
        let device = unsafe { OwnedFd::from_raw_fd(dfd) };

        let region = |index: u32| -> Result<vb::vfio_region_info> {
            let mut r = vb::vfio_region_info {
                argsz: argsz::<vb::vfio_region_info>(),
                index,
                ..Default::default()
            };
            ioctl_ptr(
                dfd,
                VFIO_DEVICE_GET_REGION_INFO,
                &mut r,
                "VFIO_DEVICE_GET_REGION_INFO",
            )?;
            Ok(r)
        };
        let config = region(vb::VFIO_PCI_CONFIG_REGION_INDEX)?;
        let bar0 = region(vb::VFIO_PCI_BAR0_REGION_INDEX)?;
        if bar0.flags & vb::VFIO_REGION_INFO_FLAG_MMAP == 0 || bar0.size < 0x2000 {
            return Err(vfio_err(format!(
                "BAR0 is not mappable or too small ({} bytes)",
                bar0.size
            )));
        }

        // Memory space for BAR0, bus mastering for DMA (without it the controller's
        // DMA silently goes nowhere), and legacy interrupts off: we poll.
        let cmd = config_rw(dfd, config.offset + PCI_COMMAND, None)?;
        config_rw(
            dfd,
            config.offset + PCI_COMMAND,
            Some(cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_INTX_DISABLE),
        )?;

        // SAFETY: maps the BAR0 region of our device descriptor at the offset and
        // length VFIO reported for it; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bar0.size as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                dfd,
                bar0.offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(last_err("mmap of BAR0"));
        }
        let bar = Bar {
            ptr: NonNull::new(p.cast()).ok_or_else(|| vfio_err("BAR0 mapped at 0".into()))?,
            len: bar0.size as usize,
        };

        let request = match register_request(dfd) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(device = %name, "no device request notification ({e}); hot unplug will wait for exit");
                None
            }
        };
        Ok(VfioDevice {
            name,
            container: Arc::new(Container {
                fd: container,
                next_iova: Mutex::new(IOVA_BASE),
            }),
            _group: group,
            device: Mutex::new(Some(device)),
            config_offset: config.offset,
            bar,
            request,
            removed: AtomicBool::new(false),
            domain: DmaDomain::new(),
        })
    }

    /// Reads the PCI command register (None once released).
    pub fn pci_command(&self) -> Option<u16> {
        let g = self.device.lock().unwrap_or_else(|e| e.into_inner());
        let fd = g.as_ref()?;
        config_rw(fd.as_raw_fd(), self.config_offset + PCI_COMMAND, None).ok()
    }
}

/// Reads (`val` None) or writes a 16-bit PCI config register; returns the value read
/// or written.
fn config_rw(dfd: i32, off: u64, val: Option<u16>) -> Result<u16> {
    let mut b = val.unwrap_or(0).to_le_bytes();
    // SAFETY: pread/pwrite of 2 bytes from/into `b`, which lives across the call.
    let n = unsafe {
        match val {
            None => libc::pread(dfd, b.as_mut_ptr().cast(), 2, off as libc::off_t),
            Some(_) => libc::pwrite(dfd, b.as_ptr().cast(), 2, off as libc::off_t),
        }
    };
    if n != 2 {
        return Err(last_err("PCI config space access"));
    }
    Ok(u16::from_le_bytes(b))
}

/// Asks VFIO to signal an eventfd when the kernel wants the device back.
fn register_request(dfd: i32) -> Result<Option<EventFd>> {
    let mut info = vb::vfio_irq_info {
        argsz: argsz::<vb::vfio_irq_info>(),
        index: vb::VFIO_PCI_REQ_IRQ_INDEX,
        ..Default::default()
    };
    ioctl_ptr(
        dfd,
        VFIO_DEVICE_GET_IRQ_INFO,
        &mut info,
        "VFIO_DEVICE_GET_IRQ_INFO",
    )?;
    if info.count == 0 {
        return Ok(None);
    }
    let ev = EventFd::new().map_err(|e| NvmeError::io("eventfd", e))?;
    let mut set = IrqSetEventfd {
        hdr: vb::vfio_irq_set {
            argsz: argsz::<IrqSetEventfd>(),
            flags: vb::VFIO_IRQ_SET_DATA_EVENTFD | vb::VFIO_IRQ_SET_ACTION_TRIGGER,
            index: vb::VFIO_PCI_REQ_IRQ_INDEX,
            start: 0,
            count: 1,
            data: Default::default(),
        },
        fd: ev.raw(),
    };
    ioctl_ptr(dfd, VFIO_DEVICE_SET_IRQS, &mut set, "VFIO_DEVICE_SET_IRQS")?;
    Ok(Some(ev))
}

impl DeviceAccess for VfioDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn bar0_len(&self) -> usize {
        self.bar.len()
    }

    fn read32(&self, off: usize) -> u32 {
        self.bar.read32(off)
    }

    fn write32(&self, off: usize, val: u32) {
        self.bar.write32(off, val)
    }

    fn dma_domain(&self) -> DmaDomain {
        self.domain
    }

    fn alloc_dma(&self, len: usize) -> Result<DmaRegion> {
        let c = self.container.clone();
        DmaRegion::allocate(len, Backing::HugeOrLocked, move |vaddr, len| {
            let iova = c.map(vaddr, len)?;
            Ok((iova, Some(c as Arc<dyn IommuUnmap>)))
        })
    }

    fn quiesce(&self) {
        let g = self.device.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fd) = g.as_ref() {
            let off = self.config_offset + PCI_COMMAND;
            match config_rw(fd.as_raw_fd(), off, None)
                .and_then(|c| config_rw(fd.as_raw_fd(), off, Some(c & !PCI_COMMAND_MASTER)))
            {
                Ok(_) => tracing::info!(device = %self.name, "bus mastering disabled"),
                Err(e) => tracing::warn!(device = %self.name, "cannot disable bus mastering: {e}"),
            }
        }
    }

    fn removal_requested(&self) -> bool {
        if self.removed.load(Ordering::Relaxed) {
            return true;
        }
        if self.request.as_ref().is_some_and(|r| r.fired()) {
            tracing::warn!(device = %self.name, "the kernel requests the device back (hot unplug)");
            self.removed.store(true, Ordering::Relaxed);
            return true;
        }
        false
    }

    fn release(&self) {
        let mut g = self.device.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            return;
        }
        if let Err(e) = self.bar.detach() {
            // Keep the descriptor: closing it while BAR0 still maps the device
            // would not let the kernel go on anyway.
            tracing::error!(device = %self.name, "cannot detach BAR0: {e}");
            return;
        }
        *g = None;
        tracing::info!(device = %self.name, "device released to the kernel");
    }
}
