# Regenerates nvl_all_types_*.nvlist and nvl_all_types.dump.txt with OpenZFS's own libnvpair
# (userland build), for the known-answer tests in tests/nvlist_golden.rs:
#   cd crates/ondisk/tests/data && python3 nvl_gen_libnvpair.py > all_types.dump.txt
# then rename the outputs with the nvl_ prefix. Set the library path below to your libnvpair.
import ctypes as C, sys
L = C.CDLL('/opt/rzfs-oracles/openzfs/lib/x86_64-linux-gnu/libnvpair.so.3')
vp = C.c_void_p
def new(flag=1):
    p = vp(); assert L.nvlist_alloc(C.byref(p), flag, 0) == 0; return p
def chk(r): assert r == 0, r
def arr(t, vals): return (t * len(vals))(*vals)
def build(neg):
    n = new()
    chk(L.nvlist_add_boolean(n, b"flag"))
    chk(L.nvlist_add_boolean_value(n, b"bv", 1))
    chk(L.nvlist_add_byte(n, b"byte", C.c_ubyte(0xab)))
    chk(L.nvlist_add_int8(n, b"i8", C.c_int8(-5 if neg else 5)))
    chk(L.nvlist_add_uint8(n, b"u8", C.c_uint8(200)))
    chk(L.nvlist_add_int16(n, b"i16", C.c_int16(-300 if neg else 300)))
    chk(L.nvlist_add_uint16(n, b"u16", C.c_uint16(65000)))
    chk(L.nvlist_add_int32(n, b"i32", C.c_int32(-70000)))
    chk(L.nvlist_add_uint32(n, b"u32", C.c_uint32(4000000000)))
    chk(L.nvlist_add_int64(n, b"i64", C.c_int64(-5000000000)))
    chk(L.nvlist_add_uint64(n, b"u64", C.c_uint64(0xfedcba9876543210)))
    chk(L.nvlist_add_string(n, b"str", b"hello, world"))
    chk(L.nvlist_add_string(n, b"empty", b""))
    chk(L.nvlist_add_hrtime(n, b"hrt", C.c_int64(123456789012)))
    chk(L.nvlist_add_double(n, b"dbl", C.c_double(3.25)))
    chk(L.nvlist_add_byte_array(n, b"ba", arr(C.c_ubyte, [1,2,3,4,5]), 5))
    chk(L.nvlist_add_int8_array(n, b"i8a", arr(C.c_int8, [1, -2 if neg else 2, 3]), 3))
    chk(L.nvlist_add_uint8_array(n, b"u8a", arr(C.c_uint8, [250, 7]), 2))
    chk(L.nvlist_add_int16_array(n, b"i16a", arr(C.c_int16, [-1 if neg else 1, 2]), 2))
    chk(L.nvlist_add_uint16_array(n, b"u16a", arr(C.c_uint16, [65535]), 1))
    chk(L.nvlist_add_int32_array(n, b"i32a", arr(C.c_int32, [-1, 0, 1]), 3))
    chk(L.nvlist_add_uint32_array(n, b"u32a", arr(C.c_uint32, [1, 2]), 2))
    chk(L.nvlist_add_int64_array(n, b"i64a", arr(C.c_int64, [-9, 9]), 2))
    chk(L.nvlist_add_uint64_array(n, b"u64a", arr(C.c_uint64, [1, 2, 3]), 3))
    chk(L.nvlist_add_uint64_array(n, b"u64a_empty", None, 0))
    chk(L.nvlist_add_int32_array(n, b"i32a_empty", None, 0))
    chk(L.nvlist_add_boolean_array(n, b"boola", arr(C.c_int, [1, 0, 1]), 3))
    chk(L.nvlist_add_string_array(n, b"stra", arr(C.c_char_p, [b"a", b"", b"xyz12"]), 3))
    chk(L.nvlist_add_string_array(n, b"stra_empty", None, 0))
    inner = new(); chk(L.nvlist_add_uint64(inner, b"x", 1)); chk(L.nvlist_add_string(inner, b"path", b"/dev/sda1"))
    deep = new(2); chk(L.nvlist_add_boolean(deep, b"deepflag")); chk(L.nvlist_add_nvlist(inner, b"deep", deep))
    chk(L.nvlist_add_nvlist(n, b"nested", inner))
    e1 = new(); chk(L.nvlist_add_uint64(e1, b"id", 0))
    e2 = new(); chk(L.nvlist_add_uint64(e2, b"id", 1)); chk(L.nvlist_add_nvlist_array(e2, b"kids", arr(vp, [e1.value]), 1))
    chk(L.nvlist_add_nvlist_array(n, b"children", arr(vp, [e1.value, e2.value]), 2))
    chk(L.nvlist_add_nvlist_array(n, b"no_children", None, 0))
    chk(L.nvlist_add_nvlist(n, b"empty_list", new()))
    return n
def pack(n, enc):
    buf = C.POINTER(C.c_char)(); ln = C.c_size_t(0)
    chk(L.nvlist_pack(n, C.byref(buf), C.byref(ln), enc, 0))
    return C.string_at(buf, ln.value)
pos = build(False); neg = build(True)
open('all_types_xdr.nvlist','wb').write(pack(pos, 1))
open('all_types_native_le.nvlist','wb').write(pack(pos, 0))
open('all_types_neg_xdr.nvlist','wb').write(pack(neg, 1))
L.dump_nvlist.restype = None
sys.stdout.flush(); L.dump_nvlist(pos, 4)
