/* Health and identity queries that fill a caller's struct or answer in the return code, from
 * a GPU's "calls" and "strings" values (see README.md):
 *   "nvmlDeviceGetSramEccErrorStatus().bThresholdExceeded"    (the other counters: 0)
 *   "nvmlDeviceGetUnrepairableMemoryFlag_v1().bUnrepairableMemory"
 *   "nvmlDeviceValidateInforom()"                1: SUCCESS, 0: CORRUPTED_INFOROM
 *   "nvmlDeviceGetPlatformInfo().<member>"       slotNumber, trayIndex, hostId, peerType,
 *                                                moduleId (needed), ibGuid (a 64-bit number,
 *                                                stored least significant byte first); the
 *                                                string "...().chassisSerialNumber"
 *   "nvmlDeviceGetGridLicensableFeatures()"      the vGPU feature's state (licensing
 *                                                supported, one feature); unset: unsupported
 *   "nvmlDeviceGetGpuInstanceProfileInfo(<profile>)"  the profile's slice count
 * A struct with the wrong version answers ARGUMENT_VERSION_MISMATCH, as NVML does. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "sim_state.h"

/* `member` of the call's values, or `otherwise` when the scenario sets none. */
static unsigned member_or(const sim_gpu *g, const char *call, const char *member,
                          unsigned otherwise) {
    double v;
    return sim_call_value(g, &v, "%s().%s", call, member) == NVML_SUCCESS ? (unsigned)v : otherwise;
}

nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device,
                                             nvmlEccSramErrorStatus_t *status) {
    sim_gpu *g;
    int slot;
    double exceeded;
    nvmlReturn_t r = sim_begin_device(FN_nvmlDeviceGetSramEccErrorStatus, device, 1, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!status) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (status->version != nvmlEccSramErrorStatus_v1)
            r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        else if ((r = sim_call_value(g, &exceeded,
                            "nvmlDeviceGetSramEccErrorStatus().bThresholdExceeded")) ==
                 NVML_SUCCESS) {
            unsigned version = status->version;
            memset(status, 0, sizeof *status);
            status->version = version;
            status->bThresholdExceeded = (unsigned)exceeded;
        }
    }
    return sim_finish(r);
}

nvmlReturn_t nvmlDeviceGetUnrepairableMemoryFlag_v1(
    nvmlDevice_t device, nvmlUnrepairableMemoryStatus_v1_t *status) {
    sim_gpu *g;
    int slot;
    double flag;
    nvmlReturn_t r =
        sim_begin_device(FN_nvmlDeviceGetUnrepairableMemoryFlag_v1, device, 1, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!status) r = NVML_ERROR_INVALID_ARGUMENT;
        else if ((r = sim_call_value(g, &flag,
                            "nvmlDeviceGetUnrepairableMemoryFlag_v1().bUnrepairableMemory")) ==
                 NVML_SUCCESS)
            status->bUnrepairableMemory = (unsigned)flag; /* nvml.h: the flag alone */
    }
    return sim_finish(r);
}

nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device) {
    sim_gpu *g;
    int slot;
    double valid;
    nvmlReturn_t r = sim_begin_device(FN_nvmlDeviceValidateInforom, device, 1, &g, &slot);
    if (r == NVML_SUCCESS && (r = sim_call_value(g, &valid, "nvmlDeviceValidateInforom()")) ==
                                 NVML_SUCCESS && !valid)
        r = NVML_ERROR_CORRUPTED_INFOROM;
    return sim_finish(r);
}

nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, nvmlPlatformInfo_t *info) {
    static const char *call = "nvmlDeviceGetPlatformInfo";
    sim_gpu *g;
    int slot;
    double module, guid = 0;
    nvmlReturn_t r = sim_begin_device(FN_nvmlDeviceGetPlatformInfo, device, 1, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!info) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (info->version != nvmlPlatformInfo_v2) r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        else if ((r = sim_call_value(g, &module, "%s().moduleId", call)) == NVML_SUCCESS) {
            unsigned version = info->version;
            memset(info, 0, sizeof *info);
            info->version = version;
            info->moduleId = (unsigned char)module;
            info->slotNumber = (unsigned char)member_or(g, call, "slotNumber", 0xFF);
            info->trayIndex = (unsigned char)member_or(g, call, "trayIndex", 0xFF);
            info->hostId = (unsigned char)member_or(g, call, "hostId", 0xFF);
            info->peerType = (unsigned char)member_or(g, call, "peerType", 0xFF);
            sim_call_value(g, &guid, "%s().ibGuid", call);
            unsigned long long bits = (unsigned long long)guid;
            for (int i = 0; i < 8; i++) info->ibGuid[i] = (unsigned char)(bits >> (8 * i));
            const char *serial = sim_string_get(g, "nvmlDeviceGetPlatformInfo().chassisSerialNumber");
            if (serial)
                memcpy(info->chassisSerialNumber, serial,
                       strnlen(serial, sizeof info->chassisSerialNumber));
            else
                memset(info->chassisSerialNumber, 0xFF, sizeof info->chassisSerialNumber);
        }
    }
    return sim_finish(r);
}

nvmlReturn_t nvmlDeviceGetGridLicensableFeatures_v4(nvmlDevice_t device,
                                                    nvmlGridLicensableFeatures_t *features) {
    sim_gpu *g;
    int slot;
    double state;
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

/* A GPU instance profile's slice count, into either version of the info struct. */
static nvmlReturn_t profile_slices(int fn, nvmlDevice_t device, unsigned profile,
                                   unsigned *id, unsigned *slice_count) {
    sim_gpu *g;
    int slot;
    double slices;
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
