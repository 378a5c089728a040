# Writes what `airlock run --artifacts` takes out of /out, and what it
# refuses: a symlink, and HTML named .txt.
import os
import struct
import zlib


def png(width, height):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\0" + b"".join(bytes((x % 256, y % 256, 128)) for x in range(width)) for y in range(height))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


with open("/out/plot.png", "wb") as f:
    f.write(png(64, 64))
with open("/out/data.csv", "w") as f:
    f.write("x,y\n1,2\n")
with open("/out/x.txt", "w") as f:
    f.write("<html><body>hi</body></html>\n")
os.symlink("/etc/passwd", "/out/evil")
