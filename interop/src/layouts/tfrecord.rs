//! Stub.
use crate::error::Result;
use crate::files::Place;
use crate::options::ForeignOptions;
use crate::parts::Parts;
pub(crate) fn open(place: &Place, _options: &ForeignOptions) -> Result<Parts> {
    Err(crate::error::InteropError::Dataset { format: None, path: place.label(), error: Box::new(crate::error::ForeignError::BadSignature) })
}
pub(crate) fn length_crc_matches(_h: &[u8]) -> bool { false }
