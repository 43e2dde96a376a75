"""Numba kernels of the camera transformations' batched implementation (:mod:`lidarmt.camera.transforms.batched`).

Each weather kernel fuses what the reference implementation (:mod:`.weather`, :mod:`.optics`) does as a chain of
whole-image OpenCV/NumPy passes (uint8 → float, a blend towards a colour per channel, the layers' maps broadcast
over the three channels with ``cv2.merge``, the sRGB transfer functions, the rounding back to uint8) into one pass
over the pixels, reading the layers as the separable row and column profiles or (H, W) maps they are made of. The
arithmetic is the reference's, in float32 and in the same order where it matters; what differs is the last bits
of ``exp``/``sqrt`` (libm here, NumPy's SIMD loops there), sums done in another order, and OpenCV's fixed-point
interpolation, so an output pixel may differ from the reference's by a grey level or a few (the tolerances per
transformation are stated and tested in ``tests/test_camera_batched.py``; docs/camera-batched.md).

The kernels are ``nogil`` (the campaign's prefetch threads run them side by side) and walk each image row as one
flat run of W×3 values, with the (H, W) maps of the row spread over the three channels first, so that LLVM
vectorises the inner loops (``fastmath``: reassociation is allowed; the same machine still gives the same bytes
run to run, as the compiled code is the same).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_F0 = np.float32(0.0)
_F1 = np.float32(1.0)
_F255 = np.float32(255.0)
_HALF = np.float32(0.5)
_INV255 = np.float32(1.0 / 255.0)
_LUT_TOP = np.float32(4095.0)  # _common._LINEAR_LUT_SIZE - 1


# -- helpers -------------------------------------------------------------------------------------------------


@njit(cache=True, inline="always")
def _spread(row, out):
    """An (W,) row spread over the three channels: out[3x + k] = row[x]."""
    for x in range(row.shape[0]):
        v = row[x]
        out[3 * x] = v
        out[3 * x + 1] = v
        out[3 * x + 2] = v


@njit(cache=True, inline="always")
def _pattern(col, w, out):
    """A per-channel constant repeated along a row: out[3x + k] = col[k]."""
    for x in range(w):
        out[3 * x] = col[0]
        out[3 * x + 1] = col[1]
        out[3 * x + 2] = col[2]


@njit(cache=True, inline="always")
def _to_u8(v):
    """to_uint8 for one value: clip to [0, 1], ×255, +0.5, truncated."""
    return np.uint8(min(max(v, _F0), _F1) * _F255 + _HALF)


@njit(cache=True, inline="always")
def _srgb_index(v):
    """linear_to_srgb's table index for one value: clip to [0, 1], ×4095, +0.5, truncated."""
    return np.int32(min(max(v, _F0), _F1) * _LUT_TOP + _HALF)


# -- weather --------------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, fastmath=True)
def upsample_add(grid, ry_idx, ry_w, rx_idx, rx_w, amp, acc):
    """acc += amp · (the grid upsampled bicubically): rows then columns, four taps each (``cv2.resize``'s
    INTER_CUBIC weights and clamped indices, given per output row and column)."""
    gh = grid.shape[0]
    w = acc.shape[1]
    tmp = np.empty((gh, w), np.float32)
    for i in range(gh):
        for x in range(w):
            tmp[i, x] = (rx_w[x, 0] * grid[i, rx_idx[x, 0]] + rx_w[x, 1] * grid[i, rx_idx[x, 1]]
                         + rx_w[x, 2] * grid[i, rx_idx[x, 2]] + rx_w[x, 3] * grid[i, rx_idx[x, 3]])
    for y in range(acc.shape[0]):
        a0, a1, a2, a3 = ry_idx[y, 0], ry_idx[y, 1], ry_idx[y, 2], ry_idx[y, 3]
        c0, c1, c2, c3 = ry_w[y, 0] * amp, ry_w[y, 1] * amp, ry_w[y, 2] * amp, ry_w[y, 3] * amp
        for x in range(w):
            acc[y, x] += c0 * tmp[a0, x] + c1 * tmp[a1, x] + c2 * tmp[a2, x] + c3 * tmp[a3, x]


@njit(cache=True, nogil=True, fastmath=True)
def fog_u8(img, noise, depth, two_p, one_m_p, neg_beta, air, out):
    """Koschmieder's fog: α = 1 − exp((n·2p + 1 − p)·d·(−β)); out = f − α·(f − A), f = img / 255."""
    h, w, _ = img.shape
    src = img.reshape(h, w * 3)
    dst = out.reshape(h, w * 3)
    col = np.empty(w * 3, np.float32)
    _pattern(air, w, col)
    alpha = np.empty(w, np.float32)
    a3 = np.empty(w * 3, np.float32)
    for y in range(h):
        db = depth[y] * neg_beta
        for x in range(w):
            alpha[x] = _F1 - np.exp((noise[y, x] * two_p + one_m_p) * db)
        _spread(alpha, a3)
        for j in range(w * 3):
            f = np.float32(src[y, j]) * _INV255
            dst[y, j] = _to_u8(f - (f - col[j]) * a3[j])


@njit(cache=True, nogil=True)
def splat_max(z, ys, xs, vals, kx, ky, norm, opacity, layer):
    """One depth layer of snow flakes: Gaussian splats (the separable kernel kx ⊗ ky, peak ``vals`` after the
    normalisation ``norm``) summed into ``layer`` (zeroed here), then z = max(z, min(layer, 1)·opacity)."""
    h, w = z.shape
    rx = (kx.shape[0] - 1) // 2
    ry = (ky.shape[0] - 1) // 2
    layer[:, :] = 0.0
    for n in range(ys.shape[0]):
        yc, xc, v = ys[n], xs[n], vals[n]
        for j in range(ky.shape[0]):
            yy = yc + j - ry
            if yy < 0 or yy >= h:
                continue
            vy = v * ky[j]
            for i in range(kx.shape[0]):
                xx = xc + i - rx
                if 0 <= xx < w:
                    layer[yy, xx] += vy * kx[i]
    for y in range(h):
        for x in range(w):
            z[y, x] = max(z[y, x], min(layer[y, x] * norm, _F1) * opacity)


@njit(cache=True, nogil=True, fastmath=True)
def snow_u8(img, keep, add, haze, haze_col, flakes, flake_col, out):
    """Snow: f = img/255·(1 − k) + 0.78k; blend towards the haze colour by the per-row haze, then towards the
    flakes' colour by the flakes' opacity."""
    h, w, _ = img.shape
    src = img.reshape(h, w * 3)
    dst = out.reshape(h, w * 3)
    hc = np.empty(w * 3, np.float32)
    fc = np.empty(w * 3, np.float32)
    _pattern(haze_col, w, hc)
    _pattern(flake_col, w, fc)
    z3 = np.empty(w * 3, np.float32)
    for y in range(h):
        hz = haze[y]
        _spread(flakes[y], z3)
        for j in range(w * 3):
            f = np.float32(src[y, j]) * _INV255 * keep + add
            f = f - (f - hc[j]) * hz
            dst[y, j] = _to_u8(f - (f - fc[j]) * z3[j])


@njit(cache=True, nogil=True, fastmath=True)
def dim_veil(img, dim, keep, add, out):
    """Rain's first step: f = img/255·dim·(1 − veil) + veil·(grey/2 + 1/4), as float32 (for the blur)."""
    h, w, _ = img.shape
    src = img.reshape(h, w * 3)
    dst = out.reshape(h, w * 3)
    for y in range(h):
        for j in range(w * 3):
            dst[y, j] = (np.float32(src[y, j]) * _INV255 * dim) * keep + add


@njit(cache=True, nogil=True)
def u8_to_float(img, out):
    """``to_float``: out = img · float32(1/255), one float32 product per value (the same bytes)."""
    src = img.reshape(img.size)
    dst = out.reshape(out.size)
    for j in range(src.shape[0]):
        dst[j] = np.float32(src[j]) * _INV255


@njit(cache=True, nogil=True)
def blotches(n, thr, specks, out):
    """Dirt's pattern before its defocus: out = max(clip((n − thr) / 0.12, 0, 1), specks), in float32 (the
    reference's ``np.maximum(np.clip((n - thr) / 0.12, 0, 1), specks)``)."""
    h, w = n.shape
    c = np.float32(0.12)
    for y in range(h):
        for x in range(w):
            v = min(max((n[y, x] - thr) / c, _F0), _F1)
            out[y, x] = max(v, specks[y, x])


@njit(cache=True, nogil=True)
def max_scaled(z, layer, k):
    """z = max(z, layer·k) in place (rain's layers into its opacity, as ``np.maximum(z, layer * k)``)."""
    h, w = z.shape
    for y in range(h):
        for x in range(w):
            z[y, x] = max(z[y, x], layer[y, x] * k)


@njit(cache=True, nogil=True)
def mean_dimmed(img, dim):
    """The mean of img/255·dim (rain's grey level): the byte sum in integers, then scaled."""
    h, w, c = img.shape
    src = img.reshape(h * w * c)
    s = 0
    for j in range(src.shape[0]):
        s += np.int64(src[j])
    return float(np.float32(np.float32(s / src.shape[0]) * _INV255) * dim)


@njit(cache=True, nogil=True, fastmath=True)
def blend_u8(f, alpha, col, out):
    """out = u8(f − α·(f − col)) with an (H, W) α: rain's streaks over the blurred scene."""
    h, w, _ = f.shape
    src = f.reshape(h, w * 3)
    dst = out.reshape(h, w * 3)
    c3 = np.empty(w * 3, np.float32)
    _pattern(col, w, c3)
    a3 = np.empty(w * 3, np.float32)
    for y in range(h):
        _spread(alpha[y], a3)
        for j in range(w * 3):
            v = src[y, j]
            dst[y, j] = _to_u8(v - (v - c3[j]) * a3[j])


@njit(cache=True, nogil=True, fastmath=True)
def night_u8(img, lin_lut, shift, fall, beam, head_gain, ambient, blue, hy, hx, hs, hc, ly_a, lx_a, ly_b, lx_b,
             lcol, k_sd, read2, k_noise, bank, oy, ox, oc, sign, srgb_lut, out):
    """Night in one pass, in linear light: the blue shift (3×3 colour matrix, mixed in by m = blue·clip(1 −
    2·illum)), the illumination illum = head_gain·fall[y]·beam[x] + ambient, the glow of the headlights and lamps
    (separable Gaussians: rows × columns), then the Poisson-Gaussian noise sd = sqrt(max(lin, 0)·k_sd + read²)·
    k_noise times a unit normal read from ``bank`` at a seeded offset, back to sRGB."""
    h, w, _ = img.shape
    hb, wb = bank.shape[0], bank.shape[1]
    nl = ly_a.shape[0]
    src = img.reshape(h, w * 3)
    dst = out.reshape(h, w * 3)
    lin = np.empty(w * 3, np.float32)
    tr = np.empty(w * 3, np.float32)
    ill3 = np.empty(w * 3, np.float32)
    m3 = np.empty(w * 3, np.float32)
    glow = np.empty(w * 3, np.float32)
    noise = np.empty(w * 3, np.float32)
    idx = np.empty(w * 3, np.int32)
    row = np.empty(w, np.float32)
    ch0, ch1, ch2 = oc % 3, (oc + 1) % 3, (oc + 2) % 3
    for y in range(h):
        fy = head_gain * fall[y]
        for x in range(w):
            row[x] = fy * beam[x] + ambient
        _spread(row, ill3)
        for x in range(w):
            row[x] = blue * min(max(_F1 - row[x] * np.float32(2.0), _F0), _F1)
        _spread(row, m3)
        for x in range(w):
            g2 = hy[y] * hx[x] * hs
            glow[3 * x] = g2 * hc[0]
            glow[3 * x + 1] = g2 * hc[1]
            glow[3 * x + 2] = g2 * hc[2]
        for n in range(nl):
            a, b = ly_a[n, y], ly_b[n, y]
            c0, c1, c2 = lcol[n, 0], lcol[n, 1], lcol[n, 2]
            for x in range(w):
                prof = a * lx_a[n, x] + b * lx_b[n, x]
                glow[3 * x] += prof * c0
                glow[3 * x + 1] += prof * c1
                glow[3 * x + 2] += prof * c2
        for j in range(w * 3):
            lin[j] = lin_lut[src[y, j]]
        for x in range(w):
            r, g, b = lin[3 * x], lin[3 * x + 1], lin[3 * x + 2]
            tr[3 * x] = shift[0, 0] * r + shift[0, 1] * g + shift[0, 2] * b
            tr[3 * x + 1] = shift[1, 0] * r + shift[1, 1] * g + shift[1, 2] * b
            tr[3 * x + 2] = shift[2, 0] * r + shift[2, 1] * g + shift[2, 2] * b
        brow = bank[(y + oy) % hb]
        x0 = 0
        while x0 < w:  # the bank's columns from (x0 + ox) mod its width, in runs that do not wrap
            bx0 = (x0 + ox) % wb
            run = min(w - x0, wb - bx0)
            for x in range(run):
                noise[3 * (x0 + x)] = brow[bx0 + x, ch0] * sign
                noise[3 * (x0 + x) + 1] = brow[bx0 + x, ch1] * sign
                noise[3 * (x0 + x) + 2] = brow[bx0 + x, ch2] * sign
            x0 += run
        for j in range(w * 3):
            v = lin[j]
            v = v + (tr[j] - v) * m3[j]
            v = v * ill3[j] + glow[j]
            sd = np.sqrt(max(v, _F0) * k_sd + read2) * k_noise
            idx[j] = _srgb_index(v + noise[j] * sd)
        for j in range(w * 3):
            dst[y, j] = srgb_lut[idx[j]]


@njit(cache=True, nogil=True, fastmath=True)
def glare_u8(img, lin_lut, ys, xs, theta2, c_half, core_y, core_x, bloom_y, bloom_x, colour, ghosts, gain,
             srgb_lut, out):
    """Sun glare in linear light: veiling glare 0.5·θ0²/(r² + θ0²) + 0.07, the core and the bloom (separable
    Gaussians), tinted by the sun's colour, plus the ghosts' layer, all times the intensity, added to the image."""
    h, w, _ = img.shape
    src = img.reshape(h, w * 3)
    dst = out.reshape(h, w * 3)
    gh = ghosts.reshape(h, w * 3)
    col = np.empty(w * 3, np.float32)
    _pattern(colour, w, col)
    light = np.empty(w, np.float32)
    l3 = np.empty(w * 3, np.float32)
    idx = np.empty(w * 3, np.int32)
    for y in range(h):
        y2 = ys[y] * ys[y]
        cy, by = core_y[y], bloom_y[y]
        for x in range(w):
            v = c_half / (y2 + xs[x] * xs[x] + theta2)
            light[x] = v + np.float32(0.07) + cy * core_x[x] + by * bloom_x[x]
        _spread(light, l3)
        for j in range(w * 3):
            idx[j] = _srgb_index(lin_lut[src[y, j]] + (l3[j] * col[j] + gh[y, j]) * gain)
        for j in range(w * 3):
            dst[y, j] = srgb_lut[idx[j]]


@njit(cache=True, nogil=True, fastmath=True)
def dirt_mix(f, blurred, thin, out):
    """Dirt's first step: out = f + (blurred − f)·thin (the scene blurred behind thin dirt)."""
    h, w, _ = f.shape
    a = f.reshape(h, w * 3)
    b = blurred.reshape(h, w * 3)
    dst = out.reshape(h, w * 3)
    t3 = np.empty(w * 3, np.float32)
    for y in range(h):
        _spread(thin[y], t3)
        for j in range(w * 3):
            v = a[y, j]
            dst[y, j] = v + (b[y, j] - v) * t3[j]


@njit(cache=True, nogil=True, fastmath=True)
def dirt_u8(f, scatter, m, out):
    """Dirt's last step: I = f + (scatter − f)·m, to uint8."""
    h, w, _ = f.shape
    a = f.reshape(h, w * 3)
    b = scatter.reshape(h, w * 3)
    dst = out.reshape(h, w * 3)
    m3 = np.empty(w * 3, np.float32)
    for y in range(h):
        _spread(m[y], m3)
        for j in range(w * 3):
            v = a[y, j]
            dst[y, j] = _to_u8(v + (b[y, j] - v) * m3[j])


@njit(cache=True, nogil=True, fastmath=True)
def droplets_u8(base, refr, shade, highlight, soft, out):
    """The drops over the filmed scene: out = u8(base + (refr·shade + highlight − base)·soft)."""
    h, w, _ = base.shape
    a = base.reshape(h, w * 3)
    r = refr.reshape(h, w * 3)
    dst = out.reshape(h, w * 3)
    s3 = np.empty(w * 3, np.float32)
    sh3 = np.empty(w * 3, np.float32)
    hl3 = np.empty(w * 3, np.float32)
    for y in range(h):
        _spread(soft[y], s3)
        _spread(shade[y], sh3)
        _spread(highlight[y], hl3)
        for j in range(w * 3):
            b = a[y, j]
            dst[y, j] = _to_u8(b + ((r[y, j] * sh3[j] + hl3[j]) - b) * s3[j])


@njit(cache=True, nogil=True)
def drop_maps(label, r, ecc, cx, cy, view, mx, my, shade, highlight, mask):
    """The drops' maps in one pass over the label image (drop k + 1 where drop k shows; 0 elsewhere): the
    refraction's remap (an inverted, shrunk view around a point above the drop), the shading (a darker rim), the
    highlight towards the top and the mask; the arithmetic of :meth:`lidarmt.camera.transforms.optics.Droplets.
    drops`, in float32. ``mx``, ``my`` start as the pixel grid, ``shade`` as 1, ``highlight`` and ``mask`` as 0."""
    h, w = label.shape
    c035 = np.float32(0.35)
    c03 = np.float32(0.3)
    c055 = np.float32(0.55)
    c045 = np.float32(0.45)
    c105 = np.float32(1.05)
    c016 = np.float32(0.16)
    two = np.float32(2.0)
    for y in range(h):
        for x in range(w):
            lab = label[y, x]
            if lab == 0:
                continue
            k = int(lab) - 1
            rk, ek, cxk, cyk = r[k], ecc[k], cx[k], cy[k]
            dx = np.float32(x) - cxk
            dy = np.float32(y) - cyk
            q = dy / ek
            rho2 = min((dx * dx + q * q) / (rk * rk), _F1)
            kk = view / rk * (_F1 + c035 * rho2)
            mx[y, x] = cxk - kk * dx
            my[y, x] = cyk - c03 * view - kk * dy
            edge = min(max((rho2 - c055) / c045, _F0), _F1)
            shade[y, x] = c105 * (_F1 - c035 * edge * edge)
            hx = dx + c035 * rk
            hy = dy + c045 * rk * ek
            sr = c016 * rk
            highlight[y, x] = c035 * np.exp(-(hx * hx + hy * hy) / (two * sr * sr))
            mask[y, x] = _F1
