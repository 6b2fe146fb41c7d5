use crate::{Dtype, Primitive};

/// A plain-old-data element type that knows its [`Dtype`].
///
/// Implemented for the primitive numeric types. Implement it for your own `#[repr(C)]`
/// structs (deriving `bytemuck::Pod` and `bytemuck::Zeroable`) to read structured streams as
/// typed slices; the returned dtype must describe the struct's exact layout, padding included.
///
/// ```
/// use guideloom_formats::{Dtype, Element, Field, Primitive};
/// #[repr(C)]
/// #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
/// struct TokenMask { token: u32, mask: u32 }
/// impl Element for TokenMask {
///     fn dtype() -> Dtype {
///         Dtype::structured([("token", Primitive::U32), ("mask", Primitive::U32)])
///             .expect("a fixed, valid layout")
///     }
/// }
/// assert_eq!(TokenMask::dtype().itemsize(), std::mem::size_of::<TokenMask>() as u64);
/// ```
pub trait Element: bytemuck::Pod + Send + Sync + 'static {
    /// The on-disk description of `Self` (its itemsize must equal `size_of::<Self>()`).
    fn dtype() -> Dtype;
}

macro_rules! prim_element {
    ($($t:ty => $p:ident),*) => {$(
        impl Element for $t {
            fn dtype() -> Dtype {
                Dtype::Primitive(Primitive::$p)
            }
        }
    )*};
}
prim_element!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64,
    i64 => I64, f32 => F32, f64 => F64);
