//! The image header reader (`workload::image_header`) and the dataset image it makes
//! (`workload::image::Image::from_file`): any bytes are sized or refused, never a panic; a size
//! read is never zero, a cut of the bytes never gives another size, and an image made from them
//! carries their exact byte count under the MIME type of the format read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmspeed::workload::image::Image;
use llmspeed::workload::image_header::{read, read_whole};

fuzz_target!(|data: &[u8]| {
    let whole = read(data);
    if let Ok(Some(h)) = whole {
        assert!(h.size.width > 0 && h.size.height > 0);
        for n in [data.len() / 2, data.len().saturating_sub(1)] {
            if let Ok(Some(cut)) = read(&data[..n]) {
                assert_eq!(cut, h);
            }
        }
        let img = Image::from_file(data).expect("a file whose size reads is an image");
        assert_eq!((img.width, img.height), (h.size.width, h.size.height));
        assert_eq!(img.encoded_bytes, data.len() as u64);
        assert!(img.url.starts_with(&format!("data:{};base64,", h.kind.mime())));
    } else {
        assert!(read_whole(data).is_err());
        assert!(Image::from_file(data).is_err());
    }
});
