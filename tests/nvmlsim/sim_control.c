/* nvmlsim_* control functions: drive the simulated node from a test in the same process.
 * All return 0 on success and -1 on bad input, with the reason in nvmlsim_last_error(). */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "sim_state.h"

static __thread char t_error[sizeof g_sim.last_error];

#define LOCKED_LOADED()                 \
    do {                                \
        sim_lock();                     \
        if (sim_ensure_loaded()) {      \
            sim_unlock();               \
            return -1;                  \
        }                               \
    } while (0)

static int done(int rc) {
    if (rc) memcpy(t_error, g_sim.last_error, sizeof t_error);
    sim_wake_waiters();
    sim_unlock();
    return rc;
}

const char *nvmlsim_last_error(void) {
    sim_lock();
    memcpy(t_error, g_sim.last_error, sizeof t_error);
    sim_unlock();
    return t_error;
}

int nvmlsim_reset(void) {
    sim_lock();
    unsigned generation = g_sim.generation;
    sim_reset_state(); /* also forgets nvmlInit, every event set and every hang */
    sim_end_hangs();   /* and no call stays blocked in one */
    g_sim.generation = generation + 1;
    for (unsigned i = 0; i < SIM_MAX_GPUS; i++) g_sim.gpus[i].generation = ++g_sim.generation;
    return done(0);
}

int nvmlsim_load_scenario(const char *json) {
    sim_lock();
    if (!json) {
        sim_set_error("load_scenario: no text");
        return done(-1);
    }
    return done(sim_load_scenario_text(json, "scenario"));
}

int nvmlsim_patch_device(unsigned gpu, const char *json) {
    LOCKED_LOADED();
    if (!json) {
        sim_set_error("patch_device: no text");
        return done(-1);
    }
    return done(sim_patch_device_text(gpu, json));
}

int nvmlsim_is_initialized(void) {
    sim_lock();
    int n = g_sim.init_refcount;
    sim_unlock();
    return n;
}

double nvmlsim_time(void) {
    sim_lock();
    sim_sync();
    double t = g_sim.last_t;
    sim_unlock();
    return t;
}

/* Switches to the manual clock; time never runs backwards. */
int nvmlsim_set_time(double t) {
    LOCKED_LOADED();
    sim_sync();
    if (!(t >= g_sim.last_t)) {
        sim_set_error("set_time: %g is before the current simulated time %g", t, g_sim.last_t);
        return done(-1);
    }
    g_sim.manual = 1;
    g_sim.t_manual = t;
    sim_sync();
    return done(0);
}

int nvmlsim_advance(double dt) {
    LOCKED_LOADED();
    if (!(dt >= 0)) {
        sim_set_error("advance: %g is negative", dt);
        return done(-1);
    }
    sim_sync();
    g_sim.manual = 1;
    g_sim.t_manual = g_sim.last_t + dt;
    sim_sync();
    return done(0);
}

int nvmlsim_set_value(unsigned gpu, const char *key, double value) {
    LOCKED_LOADED();
    return done(sim_set_device_value(gpu, key, value));
}

/* gi < 0 and mig_index < 0: whole-GPU scope; gi >= 0: that GPU instance; mig_index >= 0: that
 * MIG device's compute instance (which then stops reading its GPU instance's values). */
int nvmlsim_set_gpm_value(unsigned gpu, int gi, int mig_index, unsigned metric, double value) {
    LOCKED_LOADED();
    if (gpu >= g_sim.ngpus || metric == 0 || metric >= NVML_GPM_METRIC_MAX) {
        sim_set_error("set_gpm_value: no GPU %u or metric %u out of range", gpu, metric);
        return done(-1);
    }
    sim_sync();
    sim_gpu *g = &g_sim.gpus[gpu];
    sim_gpm_scope *scope = NULL;
    if (mig_index >= 0) {
        if (mig_index >= SIM_MAX_MIG || !g->cis[mig_index].used) {
            sim_set_error("set_gpm_value: GPU %u has no MIG device %d", gpu, mig_index);
            return done(-1);
        }
        sim_ci *ci = &g->cis[mig_index];
        if (!ci->own_gpm) {
            ci->gpm = g->gis[ci->gi_slot].gpm; /* continue from the instance's integrals */
            ci->own_gpm = 1;
        }
        scope = &ci->gpm;
    } else if (gi >= 0) {
        for (int i = 0; i < SIM_MAX_GI; i++)
            if (g->gis[i].used && g->gis[i].id == (unsigned)gi) scope = &g->gis[i].gpm;
        if (!scope) {
            sim_set_error("set_gpm_value: GPU %u has no GPU instance %d", gpu, gi);
            return done(-1);
        }
    } else {
        scope = &g->gpm;
    }
    if (sim_gpm_set(scope, metric, value)) {
        sim_set_error("set_gpm_value: too many metrics in one scope");
        return done(-1);
    }
    return done(0);
}

/* gpu < 0: every device (and the calls that take no device); code 0 clears. */
int nvmlsim_set_return(const char *function, int gpu, int code) {
    LOCKED_LOADED();
    int fn = sim_function_index(function);
    if (fn < 0) {
        sim_set_error("set_return: \"%s\" is not a function this library exports",
                      function ? function : "(null)");
        return done(-1);
    }
    if (gpu >= SIM_MAX_GPUS) {
        sim_set_error("set_return: GPU %d out of range", gpu);
        return done(-1);
    }
    if (gpu < 0) g_sim.override_all[fn] = code;
    else g_sim.override_gpu[gpu][fn] = code;
    return done(0);
}

int nvmlsim_set_field_return(unsigned gpu, unsigned field_id, int code) {
    LOCKED_LOADED();
    if (gpu >= g_sim.ngpus) {
        sim_set_error("set_field_return: GPU %u does not exist", gpu);
        return done(-1);
    }
    sim_gpu *g = &g_sim.gpus[gpu];
    for (unsigned i = 0; i < g->nfield_ret; i++)
        if (g->field_ret_id[i] == field_id) {
            g->field_ret_code[i] = code;
            return done(0);
        }
    if (g->nfield_ret >= SIM_MAX_FIELD_RET) {
        sim_set_error("set_field_return: too many field overrides");
        return done(-1);
    }
    g->field_ret_id[g->nfield_ret] = field_id;
    g->field_ret_code[g->nfield_ret++] = code;
    return done(0);
}

/* at_s < 0: now. gi/ci 0xFFFFFFFF: not attributable to a MIG instance. */
int nvmlsim_queue_xid(unsigned gpu, unsigned long long xid, unsigned gi, unsigned ci, double at_s) {
    LOCKED_LOADED();
    if (gpu >= g_sim.ngpus) {
        sim_set_error("queue_xid: GPU %u does not exist", gpu);
        return done(-1);
    }
    sim_sync();
    if (sim_queue_xid((int)gpu, xid, gi, ci, at_s)) {
        sim_set_error("queue_xid: more than %d pending events", SIM_MAX_PENDING);
        return done(-1);
    }
    sim_sync();
    return done(0);
}

/* Arms GPU_IS_LOST: after_calls >= 0 lets that many more device calls through first; at_s >= 0
 * starts it at that simulated time; for_s >= 0 ends it after that long (else it lasts until
 * nvmlsim_restore_gpu). */
int nvmlsim_set_gpu_lost(unsigned gpu, long long after_calls, double at_s, double for_s) {
    LOCKED_LOADED();
    if (gpu >= g_sim.ngpus) {
        sim_set_error("set_gpu_lost: GPU %u does not exist", gpu);
        return done(-1);
    }
    sim_sync();
    sim_gpu *g = &g_sim.gpus[gpu];
    g->lost_after_calls = after_calls < 0 ? -1 : after_calls;
    g->lost_at = at_s < 0 ? -1 : at_s;
    g->lost_for = for_s < 0 ? -1 : for_s;
    return done(0);
}

int nvmlsim_restore_gpu(unsigned gpu) {
    LOCKED_LOADED();
    if (gpu >= g_sim.ngpus) {
        sim_set_error("restore_gpu: GPU %u does not exist", gpu);
        return done(-1);
    }
    sim_gpu *g = &g_sim.gpus[gpu];
    g->lost = 0;
    g->lost_at = -1;
    g->lost_after_calls = -1;
    g->lost_for = -1;
    return done(0);
}

int nvmlsim_is_gpu_lost(unsigned gpu) {
    sim_lock();
    int lost = gpu < g_sim.ngpus && g_sim.gpus[gpu].lost;
    sim_unlock();
    return lost;
}

/* gpu < 0: every device and the calls that take none; at_s: simulated time from which calls
 * block; for_s: wall seconds each blocks. Adds to the hangs already armed. */
int nvmlsim_set_hang(const char *function, int gpu, double at_s, double for_s) {
    LOCKED_LOADED();
    return done(sim_add_hang(function, gpu, at_s, for_s));
}

/* Disarms every hang and wakes the calls blocked in one (they answer at once); returns how
 * many were blocked. */
int nvmlsim_end_hangs(void) {
    sim_lock();
    g_sim.nhangs = 0;
    unsigned woken = sim_end_hangs();
    sim_unlock();
    return (int)woken;
}

/* Calls blocked in a hang right now. */
int nvmlsim_hanging_calls(void) {
    sim_lock();
    unsigned n = sim_hanging_calls();
    sim_unlock();
    return (int)n;
}

/* code 0 clears; count < 0 and until_s < 0: every attempt fails; until_s >= 0: attempts fail
 * before that simulated time; otherwise the next `count` attempts fail. */
int nvmlsim_set_init_failure(int code, long long count, double until_s) {
    LOCKED_LOADED();
    g_sim.init_fail_code = code;
    g_sim.init_fail_remaining = count < 0 ? -1 : count;
    g_sim.init_fail_until = until_s < 0 ? -1 : until_s;
    return done(0);
}

/* function NULL: all functions; gpu -1: all devices plus the calls that take none; gpu -2:
 * only the calls that take no device. */
unsigned long long nvmlsim_call_count(const char *function, int gpu) {
    sim_lock();
    unsigned long long total = 0;
    int fn = function ? sim_function_index(function) : -1;
    if (function && fn < 0) {
        sim_unlock();
        return 0;
    }
    for (int f = 0; f < SIM_FN_COUNT; f++) {
        if (fn >= 0 && f != fn) continue;
        for (int b = 0; b <= SIM_MAX_GPUS; b++) {
            if (gpu == -2 && b != 0) continue;
            if (gpu >= 0 && b != gpu + 1) continue;
            total += g_sim.calls[f][b];
        }
    }
    sim_unlock();
    return total;
}

void nvmlsim_reset_call_counts(void) {
    sim_lock();
    memset(g_sim.calls, 0, sizeof g_sim.calls);
    sim_unlock();
}

int nvmlsim_function_count(void) { return SIM_FN_COUNT; }

const char *nvmlsim_function_name(int index) {
    return index >= 0 && index < SIM_FN_COUNT ? g_fn_names[index] : NULL;
}

/* ------------------------------------------------------------------ struct layout probes */

#define STRUCTS(X)                      \
    X(nvmlMemory_t)                     \
    X(nvmlMemory_v2_t)                  \
    X(nvmlUtilization_t)                \
    X(nvmlPciInfo_t)                    \
    X(nvmlValue_t)                      \
    X(nvmlFieldValue_t)                 \
    X(nvmlEventData_t)                  \
    X(nvmlGpmMetric_t)                  \
    X(nvmlGpmMetricsGet_t)              \
    X(nvmlGpmSupport_t)                 \
    X(nvmlProcessInfo_t)                \
    X(nvmlProcessInfo_v2_t)             \
    X(nvmlProcessUtilizationSample_t)   \
    X(nvmlDeviceAttributes_t)           \
    X(nvmlGpuInstanceInfo_t)            \
    X(nvmlGpuInstanceProfileInfo_v2_t)

unsigned long nvmlsim_sizeof(const char *name) {
    if (!name) return 0;
#define SIZE_OF(t) \
    if (strcmp(name, #t) == 0) return (unsigned long)sizeof(t);
    STRUCTS(SIZE_OF)
#undef SIZE_OF
    return 0;
}

#define FIELDS(X)                                          \
    X(nvmlMemory_v2_t, version)                            \
    X(nvmlMemory_v2_t, total)                              \
    X(nvmlMemory_v2_t, reserved)                           \
    X(nvmlMemory_v2_t, free)                               \
    X(nvmlMemory_v2_t, used)                               \
    X(nvmlMemory_t, total)                                 \
    X(nvmlMemory_t, free)                                  \
    X(nvmlMemory_t, used)                                  \
    X(nvmlUtilization_t, gpu)                              \
    X(nvmlUtilization_t, memory)                           \
    X(nvmlPciInfo_t, busIdLegacy)                          \
    X(nvmlPciInfo_t, domain)                               \
    X(nvmlPciInfo_t, bus)                                  \
    X(nvmlPciInfo_t, device)                               \
    X(nvmlPciInfo_t, pciDeviceId)                          \
    X(nvmlPciInfo_t, pciSubSystemId)                       \
    X(nvmlPciInfo_t, busId)                                \
    X(nvmlValue_t, dVal)                                   \
    X(nvmlValue_t, siVal)                                  \
    X(nvmlValue_t, uiVal)                                  \
    X(nvmlValue_t, ulVal)                                  \
    X(nvmlValue_t, ullVal)                                 \
    X(nvmlValue_t, sllVal)                                 \
    X(nvmlValue_t, usVal)                                  \
    X(nvmlFieldValue_t, fieldId)                           \
    X(nvmlFieldValue_t, scopeId)                           \
    X(nvmlFieldValue_t, timestamp)                         \
    X(nvmlFieldValue_t, latencyUsec)                       \
    X(nvmlFieldValue_t, valueType)                         \
    X(nvmlFieldValue_t, nvmlReturn)                        \
    X(nvmlFieldValue_t, value)                             \
    X(nvmlEventData_t, device)                             \
    X(nvmlEventData_t, eventType)                          \
    X(nvmlEventData_t, eventData)                          \
    X(nvmlEventData_t, gpuInstanceId)                      \
    X(nvmlEventData_t, computeInstanceId)                  \
    X(nvmlGpmMetric_t, metricId)                           \
    X(nvmlGpmMetric_t, nvmlReturn)                         \
    X(nvmlGpmMetric_t, value)                              \
    X(nvmlGpmMetric_t, metricInfo)                         \
    X(nvmlGpmMetricsGet_t, version)                        \
    X(nvmlGpmMetricsGet_t, numMetrics)                     \
    X(nvmlGpmMetricsGet_t, sample1)                        \
    X(nvmlGpmMetricsGet_t, sample2)                        \
    X(nvmlGpmMetricsGet_t, metrics)                        \
    X(nvmlGpmSupport_t, version)                           \
    X(nvmlGpmSupport_t, isSupportedDevice)                 \
    X(nvmlProcessInfo_t, pid)                              \
    X(nvmlProcessInfo_t, usedGpuMemory)                    \
    X(nvmlProcessInfo_t, gpuInstanceId)                    \
    X(nvmlProcessInfo_t, computeInstanceId)                \
    X(nvmlProcessInfo_v2_t, pid)                           \
    X(nvmlProcessInfo_v2_t, usedGpuMemory)                 \
    X(nvmlProcessInfo_v2_t, gpuInstanceId)                 \
    X(nvmlProcessInfo_v2_t, computeInstanceId)             \
    X(nvmlProcessUtilizationSample_t, pid)                 \
    X(nvmlProcessUtilizationSample_t, timeStamp)           \
    X(nvmlProcessUtilizationSample_t, smUtil)              \
    X(nvmlProcessUtilizationSample_t, memUtil)             \
    X(nvmlProcessUtilizationSample_t, encUtil)             \
    X(nvmlProcessUtilizationSample_t, decUtil)             \
    X(nvmlDeviceAttributes_t, multiprocessorCount)         \
    X(nvmlDeviceAttributes_t, sharedCopyEngineCount)       \
    X(nvmlDeviceAttributes_t, sharedDecoderCount)          \
    X(nvmlDeviceAttributes_t, sharedEncoderCount)          \
    X(nvmlDeviceAttributes_t, sharedJpegCount)             \
    X(nvmlDeviceAttributes_t, sharedOfaCount)              \
    X(nvmlDeviceAttributes_t, gpuInstanceSliceCount)       \
    X(nvmlDeviceAttributes_t, computeInstanceSliceCount)   \
    X(nvmlDeviceAttributes_t, memorySizeMB)                \
    X(nvmlGpuInstanceInfo_t, device)                       \
    X(nvmlGpuInstanceInfo_t, id)                           \
    X(nvmlGpuInstanceInfo_t, profileId)                    \
    X(nvmlGpuInstanceInfo_t, placement)                    \
    X(nvmlGpuInstanceProfileInfo_v2_t, version)            \
    X(nvmlGpuInstanceProfileInfo_v2_t, id)                 \
    X(nvmlGpuInstanceProfileInfo_v2_t, isP2pSupported)     \
    X(nvmlGpuInstanceProfileInfo_v2_t, sliceCount)         \
    X(nvmlGpuInstanceProfileInfo_v2_t, instanceCount)      \
    X(nvmlGpuInstanceProfileInfo_v2_t, multiprocessorCount)\
    X(nvmlGpuInstanceProfileInfo_v2_t, copyEngineCount)    \
    X(nvmlGpuInstanceProfileInfo_v2_t, decoderCount)       \
    X(nvmlGpuInstanceProfileInfo_v2_t, encoderCount)       \
    X(nvmlGpuInstanceProfileInfo_v2_t, jpegCount)          \
    X(nvmlGpuInstanceProfileInfo_v2_t, ofaCount)           \
    X(nvmlGpuInstanceProfileInfo_v2_t, memorySizeMB)       \
    X(nvmlGpuInstanceProfileInfo_v2_t, name)

/* Offset of a member, or -1 when the struct or member is not probed. */
long nvmlsim_offsetof(const char *struct_name, const char *field) {
    if (!struct_name || !field) return -1;
#define OFFSET_OF(t, f) \
    if (strcmp(struct_name, #t) == 0 && strcmp(field, #f) == 0) return (long)offsetof(t, f);
    FIELDS(OFFSET_OF)
#undef OFFSET_OF
    return -1;
}
