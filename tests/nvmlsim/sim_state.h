/* The simulated node behind nvmlsim: devices, MIG layout, clock, faults, call accounting.
 *
 * One global state guarded by one mutex; every exported function locks it for its whole
 * body except while blocked on a condition: nvmlEventSetWait_v2 waiting for an event, and
 * any call held by a "hang" fault, release it. */
#ifndef NVMLSIM_SIM_STATE_H
#define NVMLSIM_SIM_STATE_H

#include <pthread.h>
#include <stddef.h>

#include <nvml.h>

#include "sim_json.h"
#include "sim_table.h" /* generated at build time: the call table's entry points */

#define SIM_INTERNAL __attribute__((visibility("hidden")))

#define SIM_MAX_GPUS 16
#define SIM_MAX_MIG 8       /* MIG device slots per GPU (real parts report 7) */
#define SIM_MAX_GI 8        /* GPU instances per GPU */
#define SIM_MAX_PROCS 32
#define SIM_MAX_PROC_SAMPLES 8 /* timed utilisation samples per process */
#define SIM_MAX_UTIL_SAMPLES 16 /* timed GPU and memory utilisation samples per GPU */
#define SIM_MAX_GPM 128     /* GPM metric ids one scope can answer */
#define SIM_MAX_VALUES 1024 /* "fields" and "calls" entries of one GPU */
#define SIM_VALUE_KEY 96
#define SIM_MAX_STRINGS 16  /* "strings" entries of one GPU */
#define SIM_STRING 96
#define SIM_MAX_FIELD_RET 16
#define SIM_MAX_PENDING 128 /* XID events not yet due */
#define SIM_MAX_SETS 8
#define SIM_SET_QUEUE 64
#define SIM_MAX_HANGS 16
#define SIM_NO_ID 0xFFFFFFFFu

/* Every exported NVML entry point, in one list: drives call counting, return-code overrides
 * and the name lookup the control functions use. The entry points answered from "calls" and
 * "strings" values are the call table's (exporter/simulated/node/call_table.py), generated
 * into sim_table.c and listed by sim_table.h at build time (tests/nvmlsim/generate.py). */
#define SIM_FUNCTIONS(X)                                   \
    X(nvmlInitWithFlags)                                   \
    X(nvmlInit_v2)                                         \
    X(nvmlInit)                                            \
    X(nvmlShutdown)                                        \
    X(nvmlErrorString)                                     \
    X(nvmlSystemGetDriverVersion)                          \
    X(nvmlSystemGetNVMLVersion)                            \
    X(nvmlDeviceGetCount_v2)                               \
    X(nvmlDeviceGetCount)                                  \
    X(nvmlDeviceGetHandleByIndex_v2)                       \
    X(nvmlDeviceGetHandleByIndex)                          \
    X(nvmlDeviceGetHandleByUUID)                           \
    X(nvmlDeviceGetIndex)                                  \
    X(nvmlDeviceGetMinorNumber)                            \
    X(nvmlDeviceGetUUID)                                   \
    X(nvmlDeviceGetName)                                   \
    X(nvmlDeviceGetPciInfo_v3)                             \
    X(nvmlDeviceGetPciInfo_v2)                             \
    X(nvmlDeviceGetPciInfo)                                \
    X(nvmlDeviceGetMigMode)                                \
    X(nvmlDeviceGetMaxMigDeviceCount)                      \
    X(nvmlDeviceGetMigDeviceHandleByIndex)                 \
    X(nvmlDeviceIsMigDeviceHandle)                         \
    X(nvmlDeviceGetGpuInstanceId)                          \
    X(nvmlDeviceGetComputeInstanceId)                      \
    X(nvmlDeviceGetDeviceHandleFromMigDeviceHandle)        \
    X(nvmlDeviceGetAttributes_v2)                          \
    X(nvmlDeviceGetGpuInstanceById)                        \
    X(nvmlGpuInstanceGetInfo)                              \
    X(nvmlDeviceGetGpuInstanceProfileInfoByIdV)            \
    X(nvmlDeviceGetAttributes)                             \
    X(nvmlDeviceGetClockInfo)                              \
    X(nvmlDeviceGetTemperature)                            \
    X(nvmlDeviceGetPowerUsage)                             \
    X(nvmlDeviceGetPowerManagementLimit)                   \
    X(nvmlDeviceGetTotalEnergyConsumption)                 \
    X(nvmlDeviceGetPcieReplayCounter)                      \
    X(nvmlDeviceGetUtilizationRates)                       \
    X(nvmlDeviceGetEncoderUtilization)                     \
    X(nvmlDeviceGetDecoderUtilization)                     \
    X(nvmlDeviceGetMemoryInfo)                             \
    X(nvmlDeviceGetMemoryInfo_v2)                          \
    X(nvmlDeviceGetRemappedRows)                           \
    X(nvmlDeviceGetCurrentClocksEventReasons)              \
    X(nvmlDeviceGetCurrentClocksThrottleReasons)           \
    X(nvmlDeviceGetFieldValues)                            \
    X(nvmlDeviceGetTotalEccErrors)                         \
    X(nvmlGpmQueryDeviceSupport)                           \
    X(nvmlGpmSampleAlloc)                                  \
    X(nvmlGpmSampleFree)                                   \
    X(nvmlGpmSampleGet)                                    \
    X(nvmlGpmMigSampleGet)                                 \
    X(nvmlGpmMetricsGet)                                   \
    X(nvmlEventSetCreate)                                  \
    X(nvmlDeviceRegisterEvents)                            \
    X(nvmlDeviceGetSupportedEventTypes)                    \
    X(nvmlEventSetWait_v2)                                 \
    X(nvmlEventSetWait)                                    \
    X(nvmlEventSetFree)                                    \
    X(nvmlDeviceGetComputeRunningProcesses_v3)             \
    X(nvmlDeviceGetMPSComputeRunningProcesses_v3)          \
    X(nvmlDeviceGetProcessUtilization)                     \
    X(nvmlDeviceGetSamples)                                \
    X(nvmlDeviceReadWritePRM_v1)                           \
    X(nvmlDeviceReadPRMCounters_v1)                        \
    X(nvmlDeviceGetP2PStatus)                              \
    SIM_TABLE_FUNCTIONS(X)

enum {
#define SIM_FN_ENUM(name) FN_##name,
    SIM_FUNCTIONS(SIM_FN_ENUM)
#undef SIM_FN_ENUM
    SIM_FN_COUNT
};

/* GPM metric values of one scope (whole GPU, GPU instance or compute instance). The values are
 * percent or MiB/s as NVML reports them; `integral` is value x seconds, advanced with the
 * clock, so a metric over two samples is the time-weighted mean between them. */
typedef struct {
    unsigned n;
    unsigned id[SIM_MAX_GPM];
    double value[SIM_MAX_GPM];
    double integral[SIM_MAX_GPM];
} sim_gpm_scope;

typedef struct {
    int used;
    unsigned id; /* NVML GPU instance id */
    char profile[32];
    unsigned slices;
    unsigned long long mem_total, mem_used, mem_reserved; /* bytes */
    sim_gpm_scope gpm;
} sim_gi;

/* One MIG device = one compute instance; stored at its MIG device index. */
typedef struct {
    int used;
    int gi_slot; /* index into sim_gpu.gis */
    unsigned ci_id;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char profile[48];
    unsigned slices;
    int own_gpm; /* otherwise GPM samples read the GPU instance's scope */
    sim_gpm_scope gpm;
} sim_ci;

/* A "fields" or "calls" value: a long double, so that a 64-bit counter or mask word keeps
 * every bit (its mantissa has 64 bits on x86-64, 113 on arm64). */
typedef long double sim_number;

/* A value answered by the generic lookups of sim_calls.c: "fi:<field id>[@<scope id>]" for
 * nvmlDeviceGetFieldValues, "call:<function>(<args>)<pick>" for the other calls. */
typedef struct {
    char key[SIM_VALUE_KEY];
    sim_number value;
} sim_value;

typedef struct {
    char key[SIM_VALUE_KEY];
    char value[SIM_STRING];
} sim_string;

typedef struct {
    double at; /* simulated seconds at which NVML took the sample */
    unsigned sm_util, mem_util, enc_util, dec_util;
} sim_proc_sample;

typedef struct {
    double at; /* simulated seconds at which the driver took the sample */
    unsigned gpu_util, mem_util; /* percent */
} sim_util_sample;

typedef struct {
    unsigned pid;
    unsigned long long used_bytes;
    unsigned gi, ci;
    int mps;      /* an MPS client: listed by the MPS call, not by the compute call */
    int has_util; /* one sample stamped at each call, from the *_util values */
    unsigned sm_util, mem_util, enc_util, dec_util;
    /* or a timed history instead, as NVML's sample buffer holds several per process */
    sim_proc_sample samples[SIM_MAX_PROC_SAMPLES];
    unsigned nsamples;
} sim_proc;

typedef struct {
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned pci_device_id, pci_subsystem_id, minor;
    unsigned sm_clock, mem_clock;     /* MHz */
    unsigned temp, mem_temp;          /* degC */
    double power_mw;                  /* current draw; integrated into energy_mj */
    unsigned power_limit_mw;
    double energy_mj;
    unsigned pcie_replay;
    unsigned util_gpu, util_mem, util_enc, util_dec; /* percent */
    unsigned long long mem_total, mem_used, mem_reserved; /* bytes */
    unsigned long long ecc_sbe_vol, ecc_dbe_vol, ecc_sbe_agg, ecc_dbe_agg;
    unsigned remap_corr, remap_unc, remap_pending, remap_failure;
    unsigned long long retired_sbe, retired_dbe, retired_pending;
    unsigned long long viol_power, viol_thermal, viol_sync_boost, viol_board_limit,
        viol_low_util, viol_reliability; /* ns */
    double nvlink_tx_kib, nvlink_rx_kib;           /* cumulative, all links */
    double nvlink_tx_kib_per_s, nvlink_rx_kib_per_s;
    unsigned nvlink_links;
    unsigned long long clock_event_reasons;
    unsigned mig_capable, mig_mode, mig_pending, max_mig;
    unsigned gpm_supported;
    unsigned multiprocessors, sms_per_slice;
    sim_gpm_scope gpm;
    sim_gi gis[SIM_MAX_GI];
    sim_ci cis[SIM_MAX_MIG];
    sim_proc procs[SIM_MAX_PROCS];
    unsigned nprocs;
    sim_util_sample util_samples[SIM_MAX_UTIL_SAMPLES];
    unsigned nutil_samples; /* 0: one sample stamped at each call, from util_gpu/util_mem */
    sim_value values[SIM_MAX_VALUES];
    unsigned nvalues;
    sim_string strings[SIM_MAX_STRINGS];
    unsigned nstrings;
    unsigned field_ret_id[SIM_MAX_FIELD_RET];
    int field_ret_code[SIM_MAX_FIELD_RET];
    unsigned nfield_ret;
    unsigned generation; /* changes with the layout; GPM samples from an older one are stale */
    /* GPU_IS_LOST: pending triggers and the current episode */
    int lost;
    double lost_since, lost_for;  /* lost_for < 0: until restored */
    double lost_at;               /* < 0: no timed trigger */
    long long lost_after_calls;   /* < 0: no call-count trigger */
} sim_gpu;

/* A hang fault: from simulated time `at` on, each call of `fn` on GPU `gpu` (-1: every GPU and
 * the calls that take no device) blocks for `for_s` seconds of wall time before answering. */
typedef struct {
    int fn;
    int gpu;
    double at;
    double for_s;
} sim_hang;

typedef struct {
    int gpu;
    unsigned long long xid;
    unsigned gi, ci;
    double at; /* simulated seconds */
} sim_xid;

struct nvmlDevice_st {
    int gpu;
    int slot; /* -1: the physical GPU; otherwise the MIG device index */
};

struct nvmlEventSet_st {
    int used;
    unsigned long long mask[SIM_MAX_GPUS];
    sim_xid queue[SIM_SET_QUEUE];
    unsigned head, count;
};

typedef struct {
    int loaded;
    int init_refcount;
    unsigned generation; /* bumped whenever the device layout may have changed */
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    char nvml_version[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
    /* clock: simulated seconds; real mode follows CLOCK_MONOTONIC x speed */
    int manual;
    double speed, t_start, mono0, t_manual, last_t, wall0;
    /* init failure */
    int init_fail_code;
    long long init_fail_remaining; /* -1: unlimited */
    double init_fail_until;        /* < 0: none */
    unsigned ngpus;
    sim_gpu gpus[SIM_MAX_GPUS];
    int override_all[SIM_FN_COUNT];
    int override_gpu[SIM_MAX_GPUS][SIM_FN_COUNT];
    unsigned long long calls[SIM_FN_COUNT][SIM_MAX_GPUS + 1]; /* [fn][0] = no device */
    sim_xid pending[SIM_MAX_PENDING];
    unsigned npending;
    struct nvmlEventSet_st sets[SIM_MAX_SETS];
    sim_hang hangs[SIM_MAX_HANGS];
    unsigned nhangs;
    char last_error[512];
} sim_state;

extern sim_state g_sim SIM_INTERNAL;
extern const char *const g_fn_names[SIM_FN_COUNT] SIM_INTERNAL;

/* sim_scenario.c (callers hold the lock) */
SIM_INTERNAL void sim_reset_state(void);
SIM_INTERNAL int sim_load_scenario_text(const char *text, const char *origin);
SIM_INTERNAL int sim_patch_device_text(unsigned gpu, const char *text);
SIM_INTERNAL int sim_set_device_value(unsigned gpu, const char *key, double value);
SIM_INTERNAL void sim_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
SIM_INTERNAL int sim_function_index(const char *name);
SIM_INTERNAL int sim_return_code_from_name(const char *name);
SIM_INTERNAL double sim_mono_now(void);
SIM_INTERNAL double sim_wall_now(void);
SIM_INTERNAL int sim_gpm_find(const sim_gpm_scope *scope, unsigned id);
SIM_INTERNAL int sim_gpm_set(sim_gpm_scope *scope, unsigned id, double value);
/* Arms a hang (validated: function, GPU, times); -1 with the reason in last_error. */
SIM_INTERNAL int sim_add_hang(const char *function, int gpu, double at, double for_s);

/* Generic values (sim_scenario.c): 0 and the value, or -1 when the key is not set. */
SIM_INTERNAL int sim_value_get(const sim_gpu *g, const char *key, sim_number *out);
SIM_INTERNAL int sim_value_set(sim_gpu *g, const char *key, sim_number value);
/* Generic strings ("strings": the call's key as for "calls"): NULL when not set. */
SIM_INTERNAL const char *sim_string_get(const sim_gpu *g, const char *key);
/* A "calls" value by its key without the "call:" prefix, built from `fmt`; NOT_SUPPORTED
 * when the scenario set none (sim_calls.c). */
SIM_INTERNAL nvmlReturn_t sim_call_value(const sim_gpu *g, sim_number *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A "strings" value by its key built from `fmt`; NULL when the scenario set none. */
SIM_INTERNAL const char *sim_call_string(const sim_gpu *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Struct members the generated entry points fill: a number's bytes (least significant
 * first), a string's bytes (the rest 0; NULL: all `fill`), hex digits (NULL: zeros). */
SIM_INTERNAL void sim_put_number(unsigned char *out, size_t size, sim_number value);
SIM_INTERNAL void sim_put_text(unsigned char *out, size_t size, const char *text, int fill);
SIM_INTERNAL void sim_put_hex(unsigned char *out, size_t size, const char *text);

/* nvmlsim.c: the call prologue the entry points of sim_calls.c and sim_table.c share */
SIM_INTERNAL nvmlReturn_t sim_begin_call(int fn);
/* physical: MIG device handles answer NOT_SUPPORTED. */
SIM_INTERNAL nvmlReturn_t sim_begin_device(int fn, nvmlDevice_t d, int physical, sim_gpu **g,
                                           int *slot);
SIM_INTERNAL nvmlReturn_t sim_finish(nvmlReturn_t r);
SIM_INTERNAL int sim_mig_active(const sim_gpu *g);
SIM_INTERNAL int sim_peer_lost(const sim_gpu *g);

/* nvmlsim.c: the lock (and the condition event waits block on) live there */
SIM_INTERNAL void sim_lock(void);
SIM_INTERNAL void sim_unlock(void);
SIM_INTERNAL void sim_wake_waiters(void);
SIM_INTERNAL int sim_ensure_loaded(void); /* loads NVMLSIM_SCENARIO on first use */
SIM_INTERNAL double sim_now(void);
SIM_INTERNAL void sim_sync(void);
/* Wakes every call blocked in a hang now (it answers at once); returns how many. */
SIM_INTERNAL unsigned sim_end_hangs(void);
SIM_INTERNAL unsigned sim_hanging_calls(void);
SIM_INTERNAL int sim_queue_xid(int gpu, unsigned long long xid, unsigned gi, unsigned ci,
                               double at);

#endif
