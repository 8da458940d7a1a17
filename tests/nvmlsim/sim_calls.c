/* Board queries answered from a GPU's "calls" values (see README.md): limits, thresholds,
 * PCIe link, BAR1, modes, ECC by location, affinity, NVLink state and error counters.
 *
 * Each value's key is the call as pynvml makes it, without the device handle:
 * "nvmlDeviceGetMaxClockInfo(1)", "nvmlDeviceGetBAR1MemoryInfo().bar1Total",
 * "nvmlDeviceGetPowerManagementLimitConstraints()[0]". A call whose value is not set answers
 * NOT_SUPPORTED, as a driver does for what a board lacks; the NVLink calls default to every
 * link up with no errors (up to `nvlink_links`, MIG off). Device-less calls read GPU 0's
 * values. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim_state.h"

/* The value of the call whose key `fmt` builds; NOT_SUPPORTED when the scenario set none. */
nvmlReturn_t sim_call_value(const sim_gpu *g, double *out, const char *fmt, ...) {
    char key[SIM_VALUE_KEY] = "call:";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(key + 5, sizeof key - 5, fmt, ap);
    va_end(ap);
    return sim_value_get(g, key, out) ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

/* One unsigned value of a physical-GPU query, under the key `key`. */
static nvmlReturn_t unsigned_value(int fn, nvmlDevice_t device, unsigned *out, const char *key) {
    sim_gpu *g;
    int slot;
    double v;
    nvmlReturn_t r = sim_begin_device(fn, device, 1, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!out) r = NVML_ERROR_INVALID_ARGUMENT;
        else if ((r = sim_call_value(g, &v, "%s", key)) == NVML_SUCCESS) *out = (unsigned)v;
    }
    return sim_finish(r);
}

/* ... of a query without arguments. */
static nvmlReturn_t plain(int fn, const char *name, nvmlDevice_t device, unsigned *out) {
    char key[SIM_VALUE_KEY];
    snprintf(key, sizeof key, "%s()", name);
    return unsigned_value(fn, device, out, key);
}

#define PLAIN(name, type)                                                                   \
    nvmlReturn_t name(nvmlDevice_t device, type *value) {                                  \
        return plain(FN_##name, #name, device, (unsigned *)value);                         \
    }

PLAIN(nvmlDeviceGetFanSpeed, unsigned int)
PLAIN(nvmlDeviceGetPerformanceState, nvmlPstates_t)
PLAIN(nvmlDeviceGetPowerManagementDefaultLimit, unsigned int)
PLAIN(nvmlDeviceGetEnforcedPowerLimit, unsigned int)
PLAIN(nvmlDeviceGetMaxPcieLinkGeneration, unsigned int)
PLAIN(nvmlDeviceGetCurrPcieLinkGeneration, unsigned int)
PLAIN(nvmlDeviceGetMaxPcieLinkWidth, unsigned int)
PLAIN(nvmlDeviceGetCurrPcieLinkWidth, unsigned int)
PLAIN(nvmlDeviceGetComputeMode, nvmlComputeMode_t)
PLAIN(nvmlDeviceGetPersistenceMode, nvmlEnableState_t)
PLAIN(nvmlDeviceGetVirtualizationMode, nvmlGpuVirtualizationMode_t)
PLAIN(nvmlDeviceGetInforomConfigurationChecksum, unsigned int)
PLAIN(nvmlDeviceGetBrand, nvmlBrandType_t)

/* ... of a query with one enum argument. */
static nvmlReturn_t by_arg(int fn, const char *name, nvmlDevice_t device, int arg,
                           unsigned *out) {
    char key[SIM_VALUE_KEY];
    snprintf(key, sizeof key, "%s(%d)", name, arg);
    return unsigned_value(fn, device, out, key);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                       unsigned int *clock) {
    return by_arg(FN_nvmlDeviceGetMaxClockInfo, "nvmlDeviceGetMaxClockInfo", device, type,
                  clock);
}

nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                            unsigned int *clockMHz) {
    return by_arg(FN_nvmlDeviceGetApplicationsClock, "nvmlDeviceGetApplicationsClock", device,
                  clockType, clockMHz);
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device,
                                               nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int *temp) {
    return by_arg(FN_nvmlDeviceGetTemperatureThreshold, "nvmlDeviceGetTemperatureThreshold",
                  device, thresholdType, temp);
}

/* Two values of one call, `first` and `second` naming their keys' picks. */
static nvmlReturn_t pair(int fn, const char *name, nvmlDevice_t device, const char *first,
                         const char *second, double *a, double *b) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = sim_begin_device(fn, device, 1, &g, &slot);
    if (r == NVML_SUCCESS && (r = sim_call_value(g, a, "%s()%s", name, first)) == NVML_SUCCESS)
        r = sim_call_value(g, b, "%s()%s", name, second);
    return sim_finish(r);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device,
                                                          unsigned int *minLimit,
                                                          unsigned int *maxLimit) {
    double lo, hi;
    if (!minLimit || !maxLimit) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = pair(FN_nvmlDeviceGetPowerManagementLimitConstraints,
                          "nvmlDeviceGetPowerManagementLimitConstraints", device, "[0]", "[1]",
                          &lo, &hi);
    if (r == NVML_SUCCESS) {
        *minLimit = (unsigned)lo;
        *maxLimit = (unsigned)hi;
    }
    return r;
}

nvmlReturn_t nvmlDeviceGetAutoBoostedClocksEnabled(nvmlDevice_t device,
                                                   nvmlEnableState_t *isEnabled,
                                                   nvmlEnableState_t *defaultIsEnabled) {
    double on, by_default;
    if (!isEnabled || !defaultIsEnabled) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = pair(FN_nvmlDeviceGetAutoBoostedClocksEnabled,
                          "nvmlDeviceGetAutoBoostedClocksEnabled", device, "[0]", "[1]", &on,
                          &by_default);
    if (r == NVML_SUCCESS) {
        *isEnabled = (nvmlEnableState_t)on;
        *defaultIsEnabled = (nvmlEnableState_t)by_default;
    }
    return r;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    double a, b;
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t r = pair(FN_nvmlDeviceGetCudaComputeCapability,
                          "nvmlDeviceGetCudaComputeCapability", device, "[0]", "[1]", &a, &b);
    if (r == NVML_SUCCESS) {
        *major = (int)a;
        *minor = (int)b;
    }
    return r;
}

nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device,
                                            nvmlMarginTemperature_t *marginTempInfo) {
    sim_gpu *g;
    int slot;
    double v;
    nvmlReturn_t r = sim_begin_device(FN_nvmlDeviceGetMarginTemperature, device, 1, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!marginTempInfo) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (marginTempInfo->version != nvmlMarginTemperature_v1)
            r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        else if ((r = sim_call_value(g, &v, "nvmlDeviceGetMarginTemperature()")) == NVML_SUCCESS)
            marginTempInfo->marginTemperature = (int)v;
    }
    return sim_finish(r);
}

/* BAR1 of the physical GPU or, through a MIG device handle, of its GPU instance. */
nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory) {
    sim_gpu *g;
    int slot;
    double total, used, free_;
    nvmlReturn_t r = sim_begin_device(FN_nvmlDeviceGetBAR1MemoryInfo, device, 0, &g, &slot);
    if (r == NVML_SUCCESS && !bar1Memory) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS &&
        (r = sim_call_value(g, &total, "nvmlDeviceGetBAR1MemoryInfo().bar1Total")) == NVML_SUCCESS &&
        (r = sim_call_value(g, &used, "nvmlDeviceGetBAR1MemoryInfo().bar1Used")) == NVML_SUCCESS &&
        (r = sim_call_value(g, &free_, "nvmlDeviceGetBAR1MemoryInfo().bar1Free")) == NVML_SUCCESS) {
        bar1Memory->bar1Total = (unsigned long long)total;
        bar1Memory->bar1Used = (unsigned long long)used;
        bar1Memory->bar1Free = (unsigned long long)free_;
    }
    return sim_finish(r);
}

nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device,
                                               nvmlRowRemapperHistogramValues_t *values) {
    static const char *const names[] = {"max", "high", "partial", "low", "none"};
    sim_gpu *g;
    int slot;
    double v[5];
    nvmlReturn_t r = sim_begin_device(FN_nvmlDeviceGetRowRemapperHistogram, device, 1, &g, &slot);
    if (r == NVML_SUCCESS && !values) r = NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < 5 && r == NVML_SUCCESS; i++)
        r = sim_call_value(g, &v[i], "nvmlDeviceGetRowRemapperHistogram().%s", names[i]);
    if (r == NVML_SUCCESS) {
        values->max = (unsigned)v[0];
        values->high = (unsigned)v[1];
        values->partial = (unsigned)v[2];
        values->low = (unsigned)v[3];
        values->none = (unsigned)v[4];
    }
    return sim_finish(r);
}

nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                             nvmlEccCounterType_t counterType,
                                             nvmlMemoryLocation_t locationType,
                                             unsigned long long *count) {
    sim_gpu *g;
    int slot;
    double v;
    nvmlReturn_t r = sim_begin_device(FN_nvmlDeviceGetMemoryErrorCounter, device, 1, &g, &slot);
    if (r == NVML_SUCCESS && !count) r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS &&
        (r = sim_call_value(g, &v, "nvmlDeviceGetMemoryErrorCounter(%d,%d,%d)", errorType, counterType,
                    locationType)) == NVML_SUCCESS)
        *count = (unsigned long long)v;
    return sim_finish(r);
}

/* CPU or NUMA-node affinity words; `scope` < 0: the CPU call, which has none. */
static nvmlReturn_t affinity(int fn, const char *name, nvmlDevice_t device, unsigned size,
                             unsigned long *set, int scope) {
    sim_gpu *g;
    int slot;
    double v;
    nvmlReturn_t r = sim_begin_device(fn, device, 1, &g, &slot);
    if (r == NVML_SUCCESS && (!set || size == 0)) r = NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < size && r == NVML_SUCCESS; i++) {
        r = scope < 0 ? sim_call_value(g, &v, "%s(%u)[%u]", name, size, i)
                      : sim_call_value(g, &v, "%s(%u,%d)[%u]", name, size, scope, i);
        if (r == NVML_SUCCESS) set[i] = (unsigned long)v;
    }
    return sim_finish(r);
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                      unsigned long *cpuSet) {
    return affinity(FN_nvmlDeviceGetCpuAffinity, "nvmlDeviceGetCpuAffinity", device, cpuSetSize,
                    cpuSet, -1);
}

nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize,
                                         unsigned long *nodeSet, nvmlAffinityScope_t scope) {
    return affinity(FN_nvmlDeviceGetMemoryAffinity, "nvmlDeviceGetMemoryAffinity", device,
                    nodeSetSize, nodeSet, (int)scope);
}

/* NVLink calls: refused under MIG and without links; a link index past the last is invalid. */
static nvmlReturn_t link_call(int fn, nvmlDevice_t device, unsigned link, sim_gpu **g) {
    int slot;
    nvmlReturn_t r = sim_begin_device(fn, device, 1, g, &slot);
    if (r != NVML_SUCCESS) return r;
    if (!(*g)->nvlink_links || sim_mig_active(*g)) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (*g)->nvlink_links) return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t *isActive) {
    sim_gpu *g;
    double v;
    nvmlReturn_t r = link_call(FN_nvmlDeviceGetNvLinkState, device, link, &g);
    if (r == NVML_SUCCESS) {
        if (!isActive) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (sim_call_value(g, &v, "nvmlDeviceGetNvLinkState(%u)", link) == NVML_SUCCESS)
            *isActive = (nvmlEnableState_t)v;
        else *isActive = NVML_FEATURE_ENABLED;
    }
    return sim_finish(r);
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                             nvmlNvLinkErrorCounter_t counter,
                                             unsigned long long *counterValue) {
    sim_gpu *g;
    double v;
    nvmlReturn_t r = link_call(FN_nvmlDeviceGetNvLinkErrorCounter, device, link, &g);
    if (r == NVML_SUCCESS) {
        if (!counterValue) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (sim_call_value(g, &v, "nvmlDeviceGetNvLinkErrorCounter(%u,%d)", link, counter) ==
                 NVML_SUCCESS)
            *counterValue = (unsigned long long)v;
        else *counterValue = 0;
    }
    return sim_finish(r);
}

/* Fabric registration (nvmlGpuFabricInfo_v3_t) from the "calls" values of its members
 * state, status, cliqueId, healthMask and healthSummary; state unset: NOT_SUPPORTED. */
/* The cluster UUID from the string "nvmlDeviceGetGpuFabricInfoV().clusterUuid": 32 hex digits,
 * dashes allowed, in byte order; all zero when unset. */
static void cluster_uuid(const sim_gpu *g, unsigned char *out) {
    const char *text = sim_string_get(g, "nvmlDeviceGetGpuFabricInfoV().clusterUuid");
    memset(out, 0, NVML_GPU_FABRIC_UUID_LEN);
    for (int n = 0; text && *text && n < 2 * NVML_GPU_FABRIC_UUID_LEN; text++) {
        unsigned digit;
        if (*text == '-' || sscanf(text, "%1x", &digit) != 1) continue;
        out[n / 2] |= (unsigned char)(n % 2 ? digit : digit << 4);
        n++;
    }
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *info) {
    sim_gpu *g;
    int slot;
    double state, status = 0, clique = 0, mask = 0, summary = 0;
    nvmlReturn_t r = sim_begin_device(FN_nvmlDeviceGetGpuFabricInfoV, device, 1, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!info) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (info->version != nvmlGpuFabricInfo_v3) r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        else if ((r = sim_call_value(g, &state, "nvmlDeviceGetGpuFabricInfoV().state")) ==
                 NVML_SUCCESS) {
            sim_call_value(g, &status, "nvmlDeviceGetGpuFabricInfoV().status");
            sim_call_value(g, &clique, "nvmlDeviceGetGpuFabricInfoV().cliqueId");
            sim_call_value(g, &mask, "nvmlDeviceGetGpuFabricInfoV().healthMask");
            sim_call_value(g, &summary, "nvmlDeviceGetGpuFabricInfoV().healthSummary");
            info->state = (nvmlGpuFabricState_t)state;
            info->status = (nvmlReturn_t)status;
            info->cliqueId = (unsigned)clique;
            info->healthMask = (unsigned)mask;
            info->healthSummary = (unsigned char)summary;
            cluster_uuid(g, info->clusterUuid);
        }
    }
    return sim_finish(r);
}

/* A string answer from the GPU's "strings"; NOT_SUPPORTED when not set. */
static nvmlReturn_t text(int fn, nvmlDevice_t device, char *out, unsigned length,
                         const char *key) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = sim_begin_device(fn, device, 1, &g, &slot);
    if (r == NVML_SUCCESS) {
        const char *value = sim_string_get(g, key);
        if (!out) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (!value) r = NVML_ERROR_NOT_SUPPORTED;
        else if (strlen(value) + 1 > length) r = NVML_ERROR_INSUFFICIENT_SIZE;
        else memcpy(out, value, strlen(value) + 1);
    }
    return sim_finish(r);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    return text(FN_nvmlDeviceGetSerial, device, serial, length, "nvmlDeviceGetSerial()");
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length) {
    return text(FN_nvmlDeviceGetVbiosVersion, device, version, length,
                "nvmlDeviceGetVbiosVersion()");
}

nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version,
                                              unsigned int length) {
    return text(FN_nvmlDeviceGetInforomImageVersion, device, version, length,
                "nvmlDeviceGetInforomImageVersion()");
}

nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t device, nvmlInforomObject_t object,
                                         char *version, unsigned int length) {
    char key[SIM_VALUE_KEY];
    snprintf(key, sizeof key, "nvmlDeviceGetInforomVersion(%d)", (int)object);
    return text(FN_nvmlDeviceGetInforomVersion, device, version, length, key);
}

/* ------------------------------------------------------------------ device-less calls */

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    double v;
    nvmlReturn_t r = sim_begin_call(FN_nvmlSystemGetCudaDriverVersion_v2);
    if (r == NVML_SUCCESS) {
        if (!cudaDriverVersion) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (sim_call_value(&g_sim.gpus[0], &v, "nvmlSystemGetCudaDriverVersion_v2()") ==
                 NVML_SUCCESS)
            *cudaDriverVersion = (int)v;
        else *cudaDriverVersion = 13010;
    }
    return sim_finish(r);
}

nvmlReturn_t nvmlSystemGetConfComputeState(nvmlConfComputeSystemState_t *state) {
    double environment = 0, feature = 0, dev_tools = 0;
    nvmlReturn_t r = sim_begin_call(FN_nvmlSystemGetConfComputeState);
    if (r == NVML_SUCCESS) {
        if (!state) return sim_finish(NVML_ERROR_INVALID_ARGUMENT);
        const sim_gpu *g = &g_sim.gpus[0];
        sim_call_value(g, &environment, "nvmlSystemGetConfComputeState().environment");
        sim_call_value(g, &feature, "nvmlSystemGetConfComputeState().ccFeature");
        sim_call_value(g, &dev_tools, "nvmlSystemGetConfComputeState().devToolsMode");
        state->environment = (unsigned)environment;
        state->ccFeature = (unsigned)feature;
        state->devToolsMode = (unsigned)dev_tools;
    }
    return sim_finish(r);
}
