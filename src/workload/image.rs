//! The images a prompt carries: pixels made before the run, encoded as JPEG and written as the
//! `data:` URL the request sends ([`Image`]). Shared by the image datasets (`random_mm`).
//!
//! Pure: no IO, no clock. Everything here runs while the dataset loads, never on the measured
//! path: a request only copies the finished URL into its body.

use std::sync::Arc;

/// JPEG quality, as PIL's `Image.save(format="JPEG")` writes by default (vLLM's encoder): 75,
/// which also picks 4:2:0 chroma subsampling in both encoders, so a noise image's size in bytes
/// comes out close to vLLM's.
pub const JPEG_QUALITY: u8 = 75;

/// The largest side a JPEG can hold (its header writes each in 16 bits).
pub const MAX_SIDE: u32 = u16::MAX as u32;

/// One image of a prompt, ready to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub width: u32,
    pub height: u32,
    /// Size of the encoded file (the JPEG), before base64.
    pub encoded_bytes: u64,
    /// `data:image/jpeg;base64,...`: what an `image_url` part sends.
    pub url: Arc<str>,
}

impl Image {
    /// Pixels: width × height.
    pub fn pixels(&self) -> u64 {
        self.width as u64 * self.height as u64
    }

    /// An image of `width` × `height` RGB pixels (`rgb`: row-major, 3 bytes a pixel), encoded
    /// as JPEG at [`JPEG_QUALITY`] and written as a data URL.
    pub fn jpeg(width: u32, height: u32, rgb: &[u8]) -> Result<Image, String> {
        let file = encode_jpeg(width, height, rgb)?;
        Ok(Image {
            width,
            height,
            encoded_bytes: file.len() as u64,
            url: data_url("image/jpeg", &file).into(),
        })
    }
}

/// What an image's pixels are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Every byte drawn at random (vLLM's `random-mm`): the worst case for JPEG, so the
    /// largest request bodies.
    Noise,
    /// Every pixel black: the smallest file of that size.
    Blank,
}

/// `rgb` (row-major, 3 bytes a pixel) as a baseline JPEG file.
pub fn encode_jpeg(width: u32, height: u32, rgb: &[u8]) -> Result<Vec<u8>, String> {
    let (w, h) = match (u16::try_from(width), u16::try_from(height)) {
        (Ok(w), Ok(h)) if w > 0 && h > 0 => (w, h),
        _ => {
            return Err(format!(
                "an image of {width}x{height} pixels cannot be a JPEG (each side 1 to {MAX_SIDE})"
            ))
        }
    };
    let want = width as usize * height as usize * 3;
    if rgb.len() != want {
        return Err(format!(
            "{width}x{height} RGB pixels are {want} bytes, got {}",
            rgb.len()
        ));
    }
    let mut out = Vec::with_capacity(want / 2);
    jpeg_encoder::Encoder::new(&mut out, JPEG_QUALITY)
        .encode(rgb, w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| format!("JPEG encoding failed: {e}"))?;
    Ok(out)
}

/// `data:<mime>;base64,<bytes>`.
pub fn data_url(mime: &str, bytes: &[u8]) -> String {
    use base64::Engine as _;
    let mut url = String::with_capacity(mime.len() + 13 + bytes.len().div_ceil(3) * 4);
    url.push_str("data:");
    url.push_str(mime);
    url.push_str(";base64,");
    base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut url);
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JPEG header's frame (SOF0) sizes, read by hand: the encoder wrote what was asked.
    fn sof_size(file: &[u8]) -> (u32, u32) {
        let at = file
            .windows(2)
            .position(|w| w == [0xFF, 0xC0])
            .expect("a baseline frame marker");
        let h = u16::from_be_bytes([file[at + 5], file[at + 6]]) as u32;
        let w = u16::from_be_bytes([file[at + 7], file[at + 8]]) as u32;
        (w, h)
    }

    #[test]
    fn a_jpeg_has_the_asked_size_and_its_url_decodes_to_the_file() {
        use base64::Engine as _;
        let (w, h) = (37u32, 19u32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 7 % 251) as u8).collect();
        let file = encode_jpeg(w, h, &rgb).unwrap();
        assert_eq!(&file[..2], &[0xFF, 0xD8], "starts with SOI");
        assert_eq!(&file[file.len() - 2..], &[0xFF, 0xD9], "ends with EOI");
        assert_eq!(sof_size(&file), (w, h));
        let img = Image::jpeg(w, h, &rgb).unwrap();
        assert_eq!(img.encoded_bytes, file.len() as u64);
        assert_eq!(img.pixels(), 37 * 19);
        let b64 = img.url.strip_prefix("data:image/jpeg;base64,").unwrap();
        let back = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(back, file);
    }

    #[test]
    fn noise_costs_more_bytes_than_blank() {
        let (w, h) = (64u32, 64u32);
        let mut g = crate::workload::numpy::Generator::new(0);
        let mut noise = vec![0u8; (w * h * 3) as usize];
        g.fill_u8(&mut noise);
        let blank = vec![0u8; noise.len()];
        let n = encode_jpeg(w, h, &noise).unwrap().len();
        let b = encode_jpeg(w, h, &blank).unwrap().len();
        assert!(n > 4 * b, "noise {n} bytes, blank {b}");
    }

    #[test]
    fn bad_sizes_are_refused_by_name() {
        let e = encode_jpeg(0, 4, &[]).unwrap_err();
        assert!(e.contains("0x4"), "{e}");
        let e = encode_jpeg(70_000, 1, &[]).unwrap_err();
        assert!(e.contains("70000x1"), "{e}");
        let e = encode_jpeg(2, 2, &[0; 5]).unwrap_err();
        assert!(e.contains("12 bytes, got 5"), "{e}");
    }

    #[test]
    fn data_url_pads_like_base64() {
        assert_eq!(data_url("image/png", b"ab"), "data:image/png;base64,YWI=");
        assert_eq!(data_url("image/png", b""), "data:image/png;base64,");
    }
}
