//! An image file's format and pixel size, read from its header alone: JPEG's frame marker,
//! PNG's `IHDR`, WebP's `VP8 `/`VP8L`/`VP8X` chunk, GIF's logical screen, BMP's info header.
//! No pixel is decoded. The size is the one PIL's `Image.open(...).size` gives for the same
//! file (no EXIF rotation applied: vLLM's `process_image` applies none either).
//!
//! Pure: bytes in, a size or a reason out, never a panic. Used by the client when a dataset's
//! rows carry image files (`workload::image::Image::from_file`) and by the simulated server to
//! size the images a request sends (`mock::image`): one reader, held to PIL's own reading of
//! files PIL wrote (`tests/hf_vision.rs`) rather than to the client's encoder.

/// One image's size in pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size {
    pub width: u32,
    pub height: u32,
}

/// The file formats whose header is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Jpeg,
    Png,
    WebP,
    Gif,
    Bmp,
}

impl Kind {
    /// The MIME type a data URL of this file names.
    pub fn mime(self) -> &'static str {
        match self {
            Kind::Jpeg => "image/jpeg",
            Kind::Png => "image/png",
            Kind::WebP => "image/webp",
            Kind::Gif => "image/gif",
            Kind::Bmp => "image/bmp",
        }
    }
}

/// What a file's header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub size: Size,
}

/// The formats named in errors.
pub const KNOWN: &str = "JPEG, PNG, WebP, GIF or BMP";

/// The format a file's first bytes name, if any (at most 12 bytes are looked at).
pub fn kind_of(file: &[u8]) -> Option<Kind> {
    if file.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Kind::Png)
    } else if file.starts_with(&[0xFF, 0xD8]) {
        Some(Kind::Jpeg)
    } else if file.len() >= 12 && file.starts_with(b"RIFF") && &file[8..12] == b"WEBP" {
        Some(Kind::WebP)
    } else if file.starts_with(b"GIF87a") || file.starts_with(b"GIF89a") {
        Some(Kind::Gif)
    } else if file.starts_with(b"BM") {
        Some(Kind::Bmp)
    } else {
        None
    }
}

/// The format and size `file`'s header gives; `Ok(None)` when `file` ends before the size
/// (read more of it and ask again); `Err` when it is no image of a known format or its header
/// is malformed.
pub fn read(file: &[u8]) -> Result<Option<Header>, String> {
    let Some(kind) = kind_of(file) else {
        if file.len() < 12 && is_prefix_of_a_signature(file) {
            return Ok(None);
        }
        return Err(format!(
            "the bytes are not an image of a known format ({KNOWN}); they start {}",
            hex_start(file)
        ));
    };
    let size = match kind {
        Kind::Png => png(file)?,
        Kind::Jpeg => jpeg(file)?,
        Kind::WebP => webp(file)?,
        Kind::Gif => gif(file)?,
        Kind::Bmp => bmp(file)?,
    };
    Ok(size.map(|size| Header { kind, size }))
}

/// `read` of a whole file: a file that ends before its size is an error.
pub fn read_whole(file: &[u8]) -> Result<Header, String> {
    read(file)?.ok_or_else(|| {
        format!(
            "the image ends before its size is given ({} bytes{})",
            file.len(),
            kind_of(file)
                .map(|k| format!(", {}", k.mime()))
                .unwrap_or_default()
        )
    })
}

/// Whether a short `file` could still grow into a known signature.
fn is_prefix_of_a_signature(file: &[u8]) -> bool {
    const SIGNATURES: [&[u8]; 6] = [
        b"\x89PNG\r\n\x1a\n",
        b"\xFF\xD8",
        b"RIFF",
        b"GIF87a",
        b"GIF89a",
        b"BM",
    ];
    SIGNATURES.iter().any(|s| {
        let n = file.len().min(s.len());
        file[..n] == s[..n]
    })
}

/// Up to the first 8 bytes, in hex, for an error.
fn hex_start(file: &[u8]) -> String {
    if file.is_empty() {
        return "empty".into();
    }
    let hex: Vec<String> = file.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("with bytes {}", hex.join(" "))
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le16(b: &[u8], at: usize) -> u32 {
    u16::from_le_bytes([b[at], b[at + 1]]) as u32
}

fn le24(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], 0])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// PNG: the first chunk is `IHDR`, holding width and height (big-endian, 31 bits).
fn png(file: &[u8]) -> Result<Option<Size>, String> {
    if file.len() < 24 {
        return Ok(None);
    }
    if &file[12..16] != b"IHDR" {
        return Err("a PNG without IHDR first".into());
    }
    sized(be32(file, 16), be32(file, 20)).map(Some)
}

/// JPEG: walks the marker segments to the frame header (SOF0..SOF15 save DHT, JPG and DAC).
fn jpeg(file: &[u8]) -> Result<Option<Size>, String> {
    let mut at = 2usize;
    loop {
        // Fill bytes (0xFF runs) may stand before a marker.
        while file.get(at) == Some(&0xFF) && file.get(at + 1) == Some(&0xFF) {
            at += 1;
        }
        let (Some(&ff), Some(&marker)) = (file.get(at), file.get(at + 1)) else {
            return Ok(None);
        };
        if ff != 0xFF {
            return Err(format!("a JPEG marker was expected at byte {at}"));
        }
        if marker == 0xD9 || marker == 0xDA {
            return Err("a JPEG without a frame header before its data".into());
        }
        // TEM and RSTn stand alone: no length follows.
        if marker == 0x01 || (0xD0..=0xD7).contains(&marker) {
            at += 2;
            continue;
        }
        let (Some(&hi), Some(&lo)) = (file.get(at + 2), file.get(at + 3)) else {
            return Ok(None);
        };
        let len = u16::from_be_bytes([hi, lo]) as usize;
        if len < 2 {
            return Err(format!("a JPEG segment of length {len} at byte {at}"));
        }
        let frame = (0xC0..=0xCF).contains(&marker) && !matches!(marker, 0xC4 | 0xC8 | 0xCC);
        if frame {
            // Length, precision, then height and width.
            let Some(b) = file.get(at + 4..at + 9) else {
                return Ok(None);
            };
            let h = u16::from_be_bytes([b[1], b[2]]) as u32;
            let w = u16::from_be_bytes([b[3], b[4]]) as u32;
            return sized(w, h).map(Some);
        }
        at += 2 + len;
    }
}

/// WebP: `RIFF` size `WEBP`, then its first chunk: `VP8X` (the canvas, 24-bit sides less one),
/// `VP8 ` (a lossy key frame: start code, then 14-bit sides) or `VP8L` (lossless: signature,
/// then 14-bit sides less one).
fn webp(file: &[u8]) -> Result<Option<Size>, String> {
    if file.len() < 30 {
        return Ok(None);
    }
    match &file[12..16] {
        b"VP8X" => sized(le24(file, 24) + 1, le24(file, 27) + 1).map(Some),
        b"VP8 " => {
            if file[23..26] != [0x9D, 0x01, 0x2A] {
                return Err("a lossy WebP without its key frame's start code".into());
            }
            sized(le16(file, 26) & 0x3FFF, le16(file, 28) & 0x3FFF).map(Some)
        }
        b"VP8L" => {
            if file[20] != 0x2F {
                return Err("a lossless WebP without its signature byte".into());
            }
            let bits = le32(file, 21);
            sized((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1).map(Some)
        }
        other => Err(format!(
            "a WebP whose first chunk is {:?}, not VP8X, VP8 or VP8L",
            String::from_utf8_lossy(other)
        )),
    }
}

/// GIF: the logical screen's width and height (little-endian), as PIL takes them.
fn gif(file: &[u8]) -> Result<Option<Size>, String> {
    if file.len() < 10 {
        return Ok(None);
    }
    sized(le16(file, 6), le16(file, 8)).map(Some)
}

/// BMP: the info header after the 14-byte file header: OS/2's 12-byte core header (16-bit
/// sides) or Windows' (signed 32-bit sides; a negative height is a top-down image).
fn bmp(file: &[u8]) -> Result<Option<Size>, String> {
    if file.len() < 18 {
        return Ok(None);
    }
    let info = le32(file, 14);
    if info == 12 {
        if file.len() < 22 {
            return Ok(None);
        }
        return sized(le16(file, 18), le16(file, 20)).map(Some);
    }
    if info < 40 {
        return Err(format!("a BMP with an info header of {info} bytes"));
    }
    if file.len() < 26 {
        return Ok(None);
    }
    let w = le32(file, 18) as i32;
    let h = le32(file, 22) as i32;
    if w <= 0 {
        return Err(format!("a BMP {w} pixels wide"));
    }
    sized(w as u32, h.unsigned_abs()).map(Some)
}

fn sized(width: u32, height: u32) -> Result<Size, String> {
    if width == 0 || height == 0 {
        return Err(format!("an image of {width}x{height} pixels"));
    }
    Ok(Size { width, height })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JPEG head written by hand: SOI, an APP0 of `app` bytes, a DQT stub, then SOF0.
    fn jpeg_head(w: u16, h: u16, app: usize) -> Vec<u8> {
        let mut f = vec![0xFF, 0xD8, 0xFF, 0xE0];
        f.extend_from_slice(&((app + 2) as u16).to_be_bytes());
        f.extend(std::iter::repeat_n(0u8, app));
        f.extend_from_slice(&[0xFF, 0xDB, 0x00, 0x03, 0x00]);
        f.extend_from_slice(&[0xFF, 0xC0, 0x00, 0x11, 0x08]);
        f.extend_from_slice(&h.to_be_bytes());
        f.extend_from_slice(&w.to_be_bytes());
        f.extend_from_slice(&[3; 10]);
        f
    }

    fn size(w: u32, h: u32) -> Size {
        Size {
            width: w,
            height: h,
        }
    }

    #[test]
    fn every_prefix_of_a_header_asks_for_more_then_the_whole_gives_the_size() {
        let mut vp8x = b"RIFF\0\0\0\0WEBPVP8X\x0a\0\0\0\x10\0\0\0".to_vec();
        vp8x.extend_from_slice(&[0x3F, 0x01, 0x00, 0xC7, 0x00, 0x00]); // 320 x 200
        let mut gif = b"GIF89a".to_vec();
        gif.extend_from_slice(&[0x40, 0x01, 0xC8, 0x00]);
        // The JPEG up to its width, the last byte the size needs.
        let mut jpeg = jpeg_head(320, 200, 30);
        jpeg.truncate(jpeg.len() - 10);
        let mut bmp = b"BM".to_vec();
        bmp.extend_from_slice(&[0; 12]);
        bmp.extend_from_slice(&40u32.to_le_bytes());
        bmp.extend_from_slice(&320i32.to_le_bytes());
        bmp.extend_from_slice(&(-200i32).to_le_bytes());
        for (file, kind) in [
            (jpeg, Kind::Jpeg),
            (vp8x, Kind::WebP),
            (gif, Kind::Gif),
            (bmp, Kind::Bmp),
        ] {
            for n in 0..file.len() {
                assert_eq!(read(&file[..n]), Ok(None), "{kind:?} cut at {n}");
            }
            assert_eq!(
                read(&file),
                Ok(Some(Header {
                    kind,
                    size: size(320, 200)
                }))
            );
        }
    }

    /// Files PIL wrote (`tests/data/images/make.py`: JPEG baseline, progressive, grey, CMYK,
    /// with an EXIF rotation; PNG RGB, RGBA, palette, 16-bit; WebP lossy, lossless, animated;
    /// GIF still and animated; BMP), each sized as PIL's own `Image.open(f).size` sized it
    /// (`sizes.json`, written by the same script), and named by the format PIL names.
    #[test]
    fn pil_written_files_are_sized_as_pil_sizes_them() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/images");
        let sizes: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("sizes.json")).unwrap())
                .unwrap();
        let sizes = sizes.as_object().unwrap();
        assert!(sizes.len() >= 18, "{} files", sizes.len());
        for (name, want) in sizes {
            let file = std::fs::read(dir.join(name)).unwrap();
            let h = read_whole(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
            let pil = (
                want["width"].as_u64().unwrap() as u32,
                want["height"].as_u64().unwrap() as u32,
            );
            assert_eq!((h.size.width, h.size.height), pil, "{name}");
            let kind = match want["format"].as_str().unwrap() {
                "JPEG" => Kind::Jpeg,
                "PNG" => Kind::Png,
                "WEBP" => Kind::WebP,
                "GIF" => Kind::Gif,
                "BMP" => Kind::Bmp,
                other => panic!("{name}: {other}"),
            };
            assert_eq!(h.kind, kind, "{name}");
            // Every cut short of the whole file either asks for more or gives the same size.
            for n in 0..file.len() {
                match read(&file[..n]) {
                    Ok(None) => {}
                    Ok(Some(got)) => assert_eq!(got, h, "{name} cut at {n}"),
                    Err(e) => panic!("{name} cut at {n}: {e}"),
                }
            }
        }
    }

    #[test]
    fn what_is_not_an_image_is_named_with_its_first_bytes() {
        let e = read(b"hello, world").unwrap_err();
        assert!(
            e.contains("not an image") && e.contains("68 65 6c 6c"),
            "{e}"
        );
        assert!(read_whole(b"").unwrap_err().contains("ends before"));
        assert!(read_whole(&[0xFF, 0xD8, 0xFF])
            .unwrap_err()
            .contains("image/jpeg"));
        let e = read(b"RIFF\0\0\0\0WAVEfmt ").unwrap_err();
        assert!(e.contains("not an image"), "{e}");
        let e = read(b"RIFF\0\0\0\0WEBPALPH\0\0\0\0\0\0\0\0\0\0\0\0\0\0").unwrap_err();
        assert!(e.contains("ALPH"), "{e}");
        let mut sos = vec![0xFF, 0xD8, 0xFF, 0xDA, 0x00, 0x02, 0, 0, 0, 0];
        assert!(read(&sos).unwrap_err().contains("without a frame"));
        sos[2] = 0x00;
        assert!(read(&sos).unwrap_err().contains("marker was expected"));
        assert!(read(b"GIF89a\0\0\x01\0").unwrap_err().contains("0x1"));
    }

    #[test]
    fn standalone_jpeg_markers_are_stepped_over() {
        let mut f = vec![0xFF, 0xD8, 0xFF, 0xD0, 0xFF, 0x01];
        f.extend_from_slice(&jpeg_head(7, 9, 0)[2..]);
        assert_eq!(read_whole(&f).unwrap().size, size(7, 9));
    }
}
