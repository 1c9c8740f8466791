//! The bodies of an Arrow array given to an append: borrowed, never copied before the framing.

use arrow_array::types::{BinaryViewType, ByteArrayType, ByteViewType, StringViewType};
use arrow_array::{
    Array, BinaryArray, FixedSizeBinaryArray, GenericByteArray, GenericByteViewArray,
    LargeBinaryArray, LargeStringArray, StringArray,
};
use arrow_buffer::ArrowNativeType;
use arrow_schema::DataType;

use crate::error::{Error, Result};

/// The bodies of `array`, one per element: binary, large_binary, binary_view, fixed_size_binary,
/// or their string counterparts (the UTF-8 bytes). A null element is refused: a record has a body.
pub fn bodies(array: &dyn Array) -> Result<Vec<&[u8]>> {
    chunk_bodies([array])
}

/// The bodies of the chunks of one array (a chunked array, a stream), in order; an error names
/// an element by its index in the whole.
pub fn chunk_bodies<'a>(chunks: impl IntoIterator<Item = &'a dyn Array>) -> Result<Vec<&'a [u8]>> {
    let chunks: Vec<&dyn Array> = chunks.into_iter().collect();
    let mut base = 0;
    for a in &chunks {
        if let Some(nulls) = a.logical_nulls().filter(|n| n.null_count() > 0) {
            let first = base + nulls.iter().position(|valid| !valid).unwrap_or(0);
            let count: usize = chunks.iter().map(|c| c.logical_null_count()).sum();
            return Err(Error::InvalidArgument(format!(
                "the Arrow array has {count} null element(s) (the first at index {first}); every \
                 record needs a body: drop or fill the nulls first"
            )));
        }
        base += a.len();
    }
    let mut out = Vec::with_capacity(base);
    for a in chunks {
        out.extend(one_chunk(a)?);
    }
    Ok(out)
}

pub(super) fn one_chunk(array: &dyn Array) -> Result<Vec<&[u8]>> {
    let any = array.as_any();
    let got = match array.data_type() {
        DataType::Binary => any.downcast_ref::<BinaryArray>().map(bytes),
        DataType::LargeBinary => any.downcast_ref::<LargeBinaryArray>().map(bytes),
        DataType::Utf8 => any.downcast_ref::<StringArray>().map(bytes),
        DataType::LargeUtf8 => any.downcast_ref::<LargeStringArray>().map(bytes),
        DataType::BinaryView => any
            .downcast_ref::<GenericByteViewArray<BinaryViewType>>()
            .map(views),
        DataType::Utf8View => any
            .downcast_ref::<GenericByteViewArray<StringViewType>>()
            .map(views),
        DataType::FixedSizeBinary(_) => any
            .downcast_ref::<FixedSizeBinaryArray>()
            .map(|a| (0..a.len()).map(|i| a.value(i)).collect()),
        DataType::Struct(fields) => {
            let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
            return Err(Error::InvalidArgument(format!(
                "a struct array (fields {names:?}) holds records, not bodies: append it whole \
                 (a \"body\" field, optional \"key\" and \"headers\"), or pass the one binary \
                 column that holds the bodies, e.g. table[\"body\"]"
            )));
        }
        other => {
            return Err(Error::InvalidArgument(format!(
                "an Arrow array of {other} cannot be appended; the bodies must be binary, \
                 large_binary, binary_view or fixed_size_binary (or string, large_string, \
                 string_view: their UTF-8 bytes)"
            )))
        }
    };
    got.ok_or_else(|| Error::Internal("an Arrow array does not match its data type".into()))
}

fn bytes<T: ByteArrayType>(a: &GenericByteArray<T>) -> Vec<&[u8]> {
    let offsets = a.value_offsets();
    let data = a.value_data();
    offsets
        .windows(2)
        .map(|w| &data[w[0].as_usize()..w[1].as_usize()])
        .collect()
}

fn views<T: ByteViewType + ?Sized>(a: &GenericByteViewArray<T>) -> Vec<&[u8]> {
    (0..a.len())
        .map(|i| {
            // `value` is checked; `bytes` views each element without validating UTF-8 again.
            let v: &[u8] = a.value(i).as_ref();
            v
        })
        .collect()
}
