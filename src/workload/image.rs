//! The images a prompt carries, written as the `data:` URL the request sends ([`Image`]):
//! pixels made before the run and encoded as JPEG or PNG ([`Format`]; the image datasets
//! `random_mm`, `sglang_image`), or an image file a dataset holds (a hub row's `{bytes, path}`,
//! a local file), taken as it is ([`Image::from_file`]).
//!
//! **A dataset's image file is sent as its own bytes, not re-encoded.** vLLM 0.33's
//! `process_image` opens every image a row holds with PIL, converts it to RGB and saves it as
//! a JPEG (PIL's default quality, 75) before sending; llmspeed sends the file's bytes as they
//! are, under the MIME type its header names (`image/jpeg`, `image/png`, `image/webp`,
//! `image/gif`, `image/bmp`), so the server sees the user's exact image and loading decodes no
//! pixel. What this changes against vLLM's client: the bytes on the wire (a PNG stays a PNG,
//! lossless and usually larger than vLLM's JPEG; a JPEG keeps its own quality and its metadata,
//! EXIF orientation included, where vLLM's re-encode drops them; an animated GIF or WebP goes
//! whole where vLLM sends its first frame; an alpha channel or a grey or CMYK image goes as it
//! is where vLLM flattens it to RGB). What stays the same: each image's width and height
//! (PIL's `size`, read here from the header: [`crate::workload::image_header`]), the number
//! of images per request and where they stand in the message; the server decodes and resizes
//! either file to the same pixel grid, so its image tokens are the same. A URL string in a row
//! (`http(s)://`, `data:image/`) is passed through as vLLM passes it.
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

    /// An image file (JPEG, PNG, WebP, GIF or BMP, as a hub parquet row's `bytes` or a local
    /// file hold it) ready to send as it is: its size from its header (no pixel decoded), its
    /// byte count, and a data URL of the MIME type its header names. A file that is no image of
    /// these formats, or that ends before its size, is an error saying which.
    pub fn from_file(file: &[u8]) -> Result<Image, String> {
        let h = crate::workload::image_header::read_whole(file)?;
        Ok(Image {
            width: h.size.width,
            height: h.size.height,
            encoded_bytes: file.len() as u64,
            url: data_url(h.kind.mime(), file).into(),
        })
    }

    /// An image of `width` × `height` RGB pixels (`rgb`: row-major, 3 bytes a pixel), encoded
    /// as JPEG at [`JPEG_QUALITY`] and written as a data URL.
    pub fn jpeg(width: u32, height: u32, rgb: &[u8]) -> Result<Image, String> {
        Image::encode(Format::Jpeg, JPEG_QUALITY, width, height, rgb)
    }

    /// An image of `width` × `height` RGB pixels in `format` (`quality`: JPEG's, 1 to 100;
    /// PNG is lossless and ignores it), written as a data URL of the format's MIME type.
    pub fn encode(
        format: Format,
        quality: u8,
        width: u32,
        height: u32,
        rgb: &[u8],
    ) -> Result<Image, String> {
        let file = match format {
            Format::Jpeg => encode_jpeg_at(width, height, rgb, quality)?,
            Format::Png => encode_png(width, height, rgb)?,
        };
        Ok(Image {
            width,
            height,
            encoded_bytes: file.len() as u64,
            url: data_url(format.mime(), &file).into(),
        })
    }
}

/// The file format an image is sent in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Jpeg,
    Png,
}

impl Format {
    /// The name SGLang's `--image-format` takes (and its data URL's subtype).
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Jpeg => "jpeg",
            Format::Png => "png",
        }
    }

    pub fn mime(self) -> &'static str {
        match self {
            Format::Jpeg => "image/jpeg",
            Format::Png => "image/png",
        }
    }

    /// The largest side the format's header can hold.
    pub fn max_side(self) -> u32 {
        match self {
            Format::Jpeg => MAX_SIDE,
            // PNG's header holds 31 bits; far past what memory holds as RGB.
            Format::Png => i32::MAX as u32,
        }
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

/// `rgb` (row-major, 3 bytes a pixel) as a baseline JPEG file at [`JPEG_QUALITY`].
pub fn encode_jpeg(width: u32, height: u32, rgb: &[u8]) -> Result<Vec<u8>, String> {
    encode_jpeg_at(width, height, rgb, JPEG_QUALITY)
}

/// `rgb` as a baseline JPEG file at `quality` (1 to 100).
pub fn encode_jpeg_at(width: u32, height: u32, rgb: &[u8], quality: u8) -> Result<Vec<u8>, String> {
    let (w, h) = match (u16::try_from(width), u16::try_from(height)) {
        (Ok(w), Ok(h)) if w > 0 && h > 0 => (w, h),
        _ => {
            return Err(format!(
                "an image of {width}x{height} pixels cannot be a JPEG (each side 1 to {MAX_SIDE})"
            ))
        }
    };
    let want = check_len(width, height, rgb)?;
    let mut out = Vec::with_capacity(want / 2);
    jpeg_encoder::Encoder::new(&mut out, quality.clamp(1, 100))
        .encode(rgb, w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| format!("JPEG encoding failed: {e}"))?;
    Ok(out)
}

/// `rgb` (row-major, 3 bytes a pixel) as an 8-bit RGB PNG file, deflated at the `png` crate's
/// balanced level (PIL's default is zlib's level 6: noise stays about its raw size in both, a
/// blank image shrinks to a few hundred bytes in both).
pub fn encode_png(width: u32, height: u32, rgb: &[u8]) -> Result<Vec<u8>, String> {
    if width == 0
        || height == 0
        || width > Format::Png.max_side()
        || height > Format::Png.max_side()
    {
        return Err(format!(
            "an image of {width}x{height} pixels cannot be a PNG (each side 1 to {})",
            Format::Png.max_side()
        ));
    }
    let want = check_len(width, height, rgb)?;
    let mut out = Vec::with_capacity(want / 2 + 1024);
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Balanced);
    let fail = |e: png::EncodingError| format!("PNG encoding failed: {e}");
    let mut w = enc.write_header().map_err(fail)?;
    w.write_image_data(rgb).map_err(fail)?;
    w.finish().map_err(fail)?;
    Ok(out)
}

/// The bytes `width` × `height` RGB pixels take, checked against `rgb`.
fn check_len(width: u32, height: u32, rgb: &[u8]) -> Result<usize, String> {
    let want = width as usize * height as usize * 3;
    if rgb.len() != want {
        return Err(format!(
            "{width}x{height} RGB pixels are {want} bytes, got {}",
            rgb.len()
        ));
    }
    Ok(want)
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
    fn a_png_has_the_asked_size_and_decodes_to_its_pixels() {
        use base64::Engine as _;
        let (w, h) = (13u32, 7u32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 31 % 256) as u8).collect();
        let img = Image::encode(Format::Png, 85, w, h, &rgb).unwrap();
        let b64 = img.url.strip_prefix("data:image/png;base64,").unwrap();
        let file = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(img.encoded_bytes, file.len() as u64);
        // The IHDR chunk, read by hand: width and height, big-endian, after the signature.
        assert_eq!(&file[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&file[12..16], b"IHDR");
        let be = |at: usize| u32::from_be_bytes(file[at..at + 4].try_into().unwrap());
        assert_eq!((be(16), be(20)), (w, h));
        // Lossless: the decoder gives the pixels back.
        let mut r = png::Decoder::new(std::io::Cursor::new(&file))
            .read_info()
            .unwrap();
        let mut back = vec![0; r.output_buffer_size().unwrap()];
        let info = r.next_frame(&mut back).unwrap();
        assert_eq!(&back[..info.buffer_size()], &rgb[..]);
        assert!(encode_png(0, 1, &[]).unwrap_err().contains("0x1"));
    }

    #[test]
    fn jpeg_quality_changes_the_size_not_the_header() {
        let (w, h) = (48u32, 32u32);
        let mut g = crate::workload::numpy::Generator::new(1);
        let mut noise = vec![0u8; (w * h * 3) as usize];
        g.fill_u8(&mut noise);
        let q85 = Image::encode(Format::Jpeg, 85, w, h, &noise).unwrap();
        let q75 = Image::jpeg(w, h, &noise).unwrap();
        assert!(q85.encoded_bytes > q75.encoded_bytes);
        assert!(q85.url.starts_with("data:image/jpeg;base64,"));
    }

    #[test]
    fn a_file_is_sent_as_its_own_bytes_under_its_mime_type() {
        use base64::Engine as _;
        let (w, h) = (21u32, 11u32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 13 % 256) as u8).collect();
        for (file, mime) in [
            (encode_jpeg(w, h, &rgb).unwrap(), "image/jpeg"),
            (encode_png(w, h, &rgb).unwrap(), "image/png"),
        ] {
            let img = Image::from_file(&file).unwrap();
            assert_eq!((img.width, img.height), (w, h));
            assert_eq!(img.encoded_bytes, file.len() as u64);
            let b64 = img
                .url
                .strip_prefix(&format!("data:{mime};base64,"))
                .unwrap();
            let back = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap();
            assert_eq!(back, file);
        }
        let e = Image::from_file(b"<html>not found</html>").unwrap_err();
        assert!(e.contains("not an image"), "{e}");
    }

    #[test]
    fn data_url_pads_like_base64() {
        assert_eq!(data_url("image/png", b"ab"), "data:image/png;base64,YWI=");
        assert_eq!(data_url("image/png", b""), "data:image/png;base64,");
    }
}
