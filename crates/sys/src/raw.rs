//! A single generic `ioctl` call shape shared by the wrappers of this crate.

use std::ffi::c_void;

use rustix::fd::AsFd;
use rustix::ioctl::{Ioctl, IoctlOutput, Opcode};

/// An `ioctl` whose argument is a pointer to a caller-owned `T`, read and/or written by the
/// kernel. The result is the ioctl's integer return value.
pub(crate) struct PtrArg<'a, T> {
    opcode: Opcode,
    arg: &'a mut T,
}

// SAFETY: `as_ptr` returns a pointer to a live, exclusively borrowed `T` for the whole call;
// `IS_MUTATING` is true so rustix never assumes the kernel leaves it untouched. Whether `T`
// is the layout the kernel expects for `opcode` is the obligation of `PtrArg::new`.
unsafe impl<T> Ioctl for PtrArg<'_, T> {
    type Output = IoctlOutput;

    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        self.opcode
    }

    fn as_ptr(&mut self) -> *mut c_void {
        std::ptr::from_mut(self.arg).cast()
    }

    unsafe fn output_from_ptr(out: IoctlOutput, _: *mut c_void) -> rustix::io::Result<IoctlOutput> {
        Ok(out)
    }
}

/// Run `ioctl(fd, opcode, arg)`.
///
/// # Safety
///
/// `T` must be exactly the `#[repr(C)]` layout the kernel reads and writes for `opcode`
/// (for opcodes whose size field is smaller than `T`, such as `FS_IOC_FIEMAP`, `T` must hold
/// at least as many bytes as the kernel is told to use).
pub(crate) unsafe fn ioctl_ptr<T>(
    fd: impl AsFd,
    opcode: Opcode,
    arg: &mut T,
) -> std::io::Result<IoctlOutput> {
    // SAFETY: forwarded to the caller (see above).
    unsafe { rustix::ioctl::ioctl(fd, PtrArg { opcode, arg }) }.map_err(std::io::Error::from)
}

/// Run an `ioctl` that takes no argument.
///
/// # Safety
///
/// `opcode` must be an argument-less ioctl of the file `fd` refers to.
pub(crate) unsafe fn ioctl_none(fd: impl AsFd, opcode: Opcode) -> std::io::Result<()> {
    let mut unused = 0u64;
    // SAFETY: the kernel ignores the argument of an `_IO` ioctl; the pointer to `unused` is
    // valid anyway.
    unsafe { ioctl_ptr(fd, opcode, &mut unused) }.map(|_| ())
}
