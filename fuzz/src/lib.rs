//! Shared by the fuzz targets: how an input chooses its read splits.
//!
//! Input layout: byte 0 holds `k` (its low 3 bits); the next `k` bytes are read sizes
//! (`b % 64 + 1`, cycled); the rest is the payload. `k == 0` means one byte per read.
//! Every target checks that the split reads give exactly what the whole payload gives.

/// Splits a fuzz input into (read sizes, payload).
pub fn split_input(data: &[u8]) -> (Vec<usize>, &[u8]) {
    let Some((&c, rest)) = data.split_first() else {
        return (vec![1], data);
    };
    let k = ((c & 7) as usize).min(rest.len());
    let sizes: Vec<usize> = rest[..k].iter().map(|&b| (b % 64) as usize + 1).collect();
    let sizes = if sizes.is_empty() { vec![1] } else { sizes };
    (sizes, &rest[k..])
}

/// The payload cut into reads of the given sizes (cycled); `None` for the whole payload at once.
pub fn reads<'a>(payload: &'a [u8], sizes: Option<&[usize]>) -> Vec<&'a [u8]> {
    let Some(sizes) = sizes else {
        return vec![payload];
    };
    let mut out = Vec::new();
    let mut pos = 0;
    let mut k = 0;
    while pos < payload.len() {
        let n = sizes[k % sizes.len()].min(payload.len() - pos);
        out.push(&payload[pos..pos + n]);
        pos += n;
        k += 1;
    }
    out
}
