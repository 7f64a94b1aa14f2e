//! The device-access trait the driver is written against, as in OpenVMM's
//! nvme_driver: BAR0 register access and DMA memory. Two implementations:
//! [`crate::VfioDevice`] (a PCI function bound to vfio-pci) and
//! [`crate::EmulatedController`] (in-process, for tests and the benchmark).

#![deny(unsafe_code)]

use crate::hw::DmaRegion;
use crate::Result;
use cairn_blockdev::DmaDomain;

/// What the driver needs from a controller's PCI function.
pub trait DeviceAccess: Send + Sync + std::fmt::Debug {
    /// Name for logs and errors (the PCI address, or `emu:N`).
    fn name(&self) -> &str;
    /// Length of the BAR0 register window.
    fn bar0_len(&self) -> usize;
    /// 32-bit register read at a BAR0 offset (all ones outside the window or when
    /// the device is gone).
    fn read32(&self, off: usize) -> u32;
    /// 32-bit register write at a BAR0 offset (doorbells are written through this).
    fn write32(&self, off: usize, val: u32);
    /// 64-bit register read as two 32-bit reads, low half first (NVMe allows it
    /// for CAP, ASQ and ACQ).
    fn read64(&self, off: usize) -> u64 {
        self.read32(off) as u64 | (self.read32(off + 4) as u64) << 32
    }
    /// 64-bit register write as two 32-bit writes, low half first.
    fn write64(&self, off: usize, val: u64) {
        self.write32(off, val as u32);
        self.write32(off + 4, (val >> 32) as u32);
    }
    /// The address space of this device's DMA.
    fn dma_domain(&self) -> DmaDomain;
    /// Allocates memory the device can reach by DMA, with its IOVA.
    fn alloc_dma(&self, len: usize) -> Result<DmaRegion>;
    /// Stops the device from doing any more DMA (PCI bus mastering off), so buffers
    /// of commands that will never complete can be handed back safely.
    fn quiesce(&self) {}
    /// Whether the platform asked for the device back (VFIO device request: a hot
    /// unplug is waiting for us to let go).
    fn removal_requested(&self) -> bool {
        false
    }
    /// Lets go of the device (after [`DeviceAccess::quiesce`]) so a pending removal
    /// can finish; register accesses afterwards are harmless no-ops.
    fn release(&self) {}
}
