pub const KIBIBYTE: u32 = 1024;
pub const MEBIBYTE: u32 = 1024 * 1024;
pub const GIBIBYTE: u64 = 1024 * 1024 * 1024;
pub const TEBIBYTE: u64 = 1024 * 1024 * 1024 * 1024;
