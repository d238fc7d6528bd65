mod integrity;
pub(crate) mod records;
mod signing;
