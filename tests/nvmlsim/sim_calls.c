/* The "calls" and "strings" values behind the call table's entry points (see README.md).
 *
 * The entry points of exporter/simulated/node/call_table.py are generated at build time
 * (tests/nvmlsim/generate.py) and read their values through the helpers here, by keys made
 * as the table says: the call as pynvml makes it, without the device handle, then the member
 * or list entry ("nvmlDeviceGetMaxClockInfo(1)", "nvmlDeviceGetBAR1MemoryInfo().bar1Total").
 * Two entries are written by hand below: a struct of structs (vGPU licensing) and a call in
 * two struct versions (GPU instance profiles). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim_state.h"

/* The value of the call whose key `fmt` builds; NOT_SUPPORTED when the scenario set none. */
nvmlReturn_t sim_call_value(const sim_gpu *g, sim_number *out, const char *fmt, ...) {
    char key[SIM_VALUE_KEY] = "call:";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key + 5, sizeof key - 5, fmt, ap);
    va_end(ap);
    return sim_value_get(g, key, out) ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

/* The "strings" value whose key `fmt` builds; NULL when the scenario set none. */
const char *sim_call_string(const sim_gpu *g, const char *fmt, ...) {
    char key[SIM_VALUE_KEY];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key, sizeof key, fmt, ap);
    va_end(ap);
    return sim_string_get(g, key);
}

/* A number's bytes, least significant first (at most 8; the rest 0). */
void sim_put_number(unsigned char *out, size_t size, sim_number value) {
    unsigned long long bits = (unsigned long long)value;
    for (size_t i = 0; i < size; i++) out[i] = i < 8 ? (unsigned char)(bits >> (8 * i)) : 0;
}

/* A string's bytes (cut at `size`, the rest 0); NULL: every byte `fill`. */
void sim_put_text(unsigned char *out, size_t size, const char *text, int fill) {
    memset(out, text ? 0 : fill, size);
    if (text) memcpy(out, text, strnlen(text, size));
}

/* Hex digits, two to a byte, dashes and other characters skipped; NULL: zeros. */
void sim_put_hex(unsigned char *out, size_t size, const char *text) {
    memset(out, 0, size);
    for (size_t n = 0; text && *text && n < 2 * size; text++) {
        unsigned digit;
        if (*text == '-' || sscanf(text, "%1x", &digit) != 1) continue;
        out[n / 2] |= (unsigned char)(n % 2 ? digit : digit << 4);
        n++;
    }
}

/* "nvmlDeviceGetGridLicensableFeatures()": the vGPU feature's state (licensing supported,
 * one feature); unset: licensing not supported. */
nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v4(nvmlDevice_t device,
                                                    nvmlGridLicensableFeatures_t *features) {
    sim_gpu *g;
    int slot;
    sim_number state;
    nvmlReturn_t r =
        sim_begin_device(FN_nvmlDeviceGetGridLicensableFeatures_v4, device, 1, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!features) r = NVML_ERROR_INVALID_ARGUMENT;
        else {
            memset(features, 0, sizeof *features);
            if (sim_call_value(g, &state, "nvmlDeviceGetGridLicensableFeatures()") == NVML_SUCCESS) {
                features->isGridLicenseSupported = 1;
                features->licensableFeaturesCount = 1;
                features->gridLicensableFeatures[0].featureCode = NVML_GRID_LICENSE_FEATURE_CODE_VGPU;
                features->gridLicensableFeatures[0].featureState = (unsigned)state;
            }
        }
    }
    return sim_finish(r);
}

/* "nvmlDeviceGetGpuInstanceProfileInfo(<profile>)": the profile's slice count, into either
 * version of the info struct; a GPU that is not MIG-capable answers NOT_SUPPORTED. */
static nvmlReturn_t profile_slices(int fn, nvmlDevice_t device, unsigned profile,
                                   unsigned *id, unsigned *slice_count) {
    sim_gpu *g;
    int slot;
    sim_number slices;
    nvmlReturn_t r = sim_begin_device(fn, device, 1, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!g->mig_capable) r = NVML_ERROR_NOT_SUPPORTED;
        else if ((r = sim_call_value(g, &slices, "nvmlDeviceGetGpuInstanceProfileInfo(%u)", profile)) ==
                 NVML_SUCCESS) {
            *id = profile;
            *slice_count = (unsigned)slices;
        }
    }
    return sim_finish(r);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    return profile_slices(FN_nvmlDeviceGetGpuInstanceProfileInfoV, device, profile, &info->id,
                          &info->sliceCount);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info) {
    if (!info) return NVML_ERROR_INVALID_ARGUMENT;
    return profile_slices(FN_nvmlDeviceGetGpuInstanceProfileInfo, device, profile, &info->id,
                          &info->sliceCount);
}
