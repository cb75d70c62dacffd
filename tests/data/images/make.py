"""Writes the image files `workload::image_header`'s tests read, with PIL, and `sizes.json`:
what PIL's own `Image.open(f).size` and `.format` say of each file after writing it.

Run with the reference Python (`$LLMSPEED_VLLM_REF_PYTHON tests/data/images/make.py`), from
anywhere; it writes beside itself. The files are small gradients (a few hundred bytes each).
"""

import io
import json
import os

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))


def gradient(w, h, mode="RGB"):
    im = Image.new("RGB", (w, h))
    im.putdata([((x * 7) % 256, (y * 11) % 256, ((x + y) * 5) % 256) for y in range(h) for x in range(w)])
    return im.convert(mode) if mode != "RGB" else im


def main():
    files = {}

    def save(name, im, **kw):
        path = os.path.join(HERE, name)
        im.save(path, **kw)
        with Image.open(path) as back:
            files[name] = {"width": back.size[0], "height": back.size[1], "format": back.format}

    save("rgb.jpg", gradient(37, 23))
    save("progressive.jpg", gradient(41, 17), progressive=True)
    save("gray.jpg", gradient(19, 29, "L"))
    save("cmyk.jpg", gradient(23, 11, "CMYK"))
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 on display; PIL's size stays the stored one
    save("exif_rotated.jpg", gradient(40, 20), exif=exif.tobytes())
    save("big_side.jpg", gradient(1300, 3), quality=50)
    save("rgb.png", gradient(37, 23))
    save("rgba.png", gradient(33, 21, "RGBA"))
    save("palette.png", gradient(17, 31, "P"))
    save("gray16.png", gradient(9, 5, "I;16"))
    save("lossy.webp", gradient(37, 23), lossless=False)
    save("lossless.webp", gradient(35, 19), lossless=True)
    save("alpha.webp", gradient(29, 13, "RGBA"), lossless=False)
    frames = [gradient(25, 15), gradient(25, 15).transpose(Image.FLIP_LEFT_RIGHT)]
    save("animated.webp", frames[0], save_all=True, append_images=frames[1:], duration=100)
    save("static.gif", gradient(27, 14))
    save("animated.gif", frames[0], save_all=True, append_images=frames[1:], duration=100)
    save("rgb.bmp", gradient(37, 23))
    save("gray.bmp", gradient(12, 7, "L"))
    with open(os.path.join(HERE, "sizes.json"), "w") as f:
        json.dump(files, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
