/* nvmlsim: a simulated libnvidia-ml.so.1 for tests without a GPU.
 *
 * Built against the real nvml.h, so every exported entry point has NVML's exact signature and
 * fills NVML's own structs; the unmodified pynvml loads it like the driver's library. Only the
 * functions below are exported: pynvml raises FUNCTION_NOT_FOUND for anything else.
 * The scenario (devices, MIG layout, faults) comes from the JSON file named by
 * NVMLSIM_SCENARIO, read at the first nvmlInitWithFlags, or from the nvmlsim_* control
 * functions; see README.md. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_state.h"

#define SAMPLE_MAGIC 0x47504d53u /* "GPMS" */
#define MIB 1048576ull

struct nvmlGpmSample_st {
    unsigned magic;
    int filled;
    int gpu;
    unsigned generation;
    int kind; /* 0: whole GPU, 1: GPU instance, 2: compute instance (MIG device) */
    int ref;  /* GPU instance id or MIG device index */
    double t;
    unsigned n;
    unsigned id[SIM_MAX_GPM];
    double integral[SIM_MAX_GPM];
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond;
/* Calls held by a hang fault wait here; outside g_sim, so a reset or a new scenario does not
 * lose count of calls that are still blocked. */
static pthread_cond_t g_hang_cond;
static unsigned g_hanging;           /* calls blocked in a hang now */
static unsigned long long g_hang_epoch; /* bumped to end the current hangs early */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct nvmlDevice_st g_gpu_handles[SIM_MAX_GPUS];
static struct nvmlDevice_st g_mig_handles[SIM_MAX_GPUS][SIM_MAX_MIG];
/* A GPU instance handle: the GPU and the instance's slot in sim_gpu.gis. */
struct nvmlGpuInstance_st {
    int gpu;
    int slot;
};
static struct nvmlGpuInstance_st g_gi_handles[SIM_MAX_GPUS][SIM_MAX_GI];

static void once_init(void) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g_cond, &attr);
    pthread_cond_init(&g_hang_cond, &attr);
    pthread_condattr_destroy(&attr);
    for (int i = 0; i < SIM_MAX_GPUS; i++) {
        g_gpu_handles[i].gpu = i;
        g_gpu_handles[i].slot = -1;
        for (int s = 0; s < SIM_MAX_MIG; s++) {
            g_mig_handles[i][s].gpu = i;
            g_mig_handles[i][s].slot = s;
        }
        for (int s = 0; s < SIM_MAX_GI; s++) {
            g_gi_handles[i][s].gpu = i;
            g_gi_handles[i][s].slot = s;
        }
    }
    sim_reset_state();
}

static void lock(void) {
    pthread_once(&g_once, once_init);
    pthread_mutex_lock(&g_mu);
}

static nvmlReturn_t finish(nvmlReturn_t r) {
    pthread_mutex_unlock(&g_mu);
    return r;
}

/* ------------------------------------------------------------------ clock and events */

double sim_now(void) {
    if (g_sim.manual) return g_sim.t_manual;
    return g_sim.t_start + (sim_mono_now() - g_sim.mono0) * g_sim.speed;
}

static void integrate_scope(sim_gpm_scope *s, double dt) {
    for (unsigned i = 0; i < s->n; i++) s->integral[i] += s->value[i] * dt;
}

static void integrate(double dt) {
    for (unsigned i = 0; i < g_sim.ngpus; i++) {
        sim_gpu *g = &g_sim.gpus[i];
        g->energy_mj += g->power_mw * dt; /* mW x s = mJ */
        g->nvlink_tx_kib += g->nvlink_tx_kib_per_s * dt;
        g->nvlink_rx_kib += g->nvlink_rx_kib_per_s * dt;
        integrate_scope(&g->gpm, dt);
        for (int k = 0; k < SIM_MAX_GI; k++)
            if (g->gis[k].used) integrate_scope(&g->gis[k].gpm, dt);
        for (int k = 0; k < SIM_MAX_MIG; k++)
            if (g->cis[k].used && g->cis[k].own_gpm) integrate_scope(&g->cis[k].gpm, dt);
    }
}

static void deliver(const sim_xid *e) {
    int any = 0;
    for (int s = 0; s < SIM_MAX_SETS; s++) {
        struct nvmlEventSet_st *set = &g_sim.sets[s];
        if (!set->used || !(set->mask[e->gpu] & nvmlEventTypeXidCriticalError)) continue;
        if (set->count == SIM_SET_QUEUE) { /* full: the oldest event is dropped */
            set->head = (set->head + 1) % SIM_SET_QUEUE;
            set->count--;
        }
        set->queue[(set->head + set->count) % SIM_SET_QUEUE] = *e;
        set->count++;
        any = 1;
    }
    if (any) pthread_cond_broadcast(&g_cond);
}

/* Events due by now reach the sets registered now; earlier registration is not replayed. */
static void deliver_due(void) {
    unsigned keep = 0;
    for (unsigned i = 0; i < g_sim.npending; i++) {
        if (g_sim.pending[i].at <= g_sim.last_t) deliver(&g_sim.pending[i]);
        else g_sim.pending[keep++] = g_sim.pending[i];
    }
    g_sim.npending = keep;
}

void sim_sync(void) {
    double t = sim_now();
    if (t > g_sim.last_t) {
        integrate(t - g_sim.last_t);
        g_sim.last_t = t;
    }
    deliver_due();
}

int sim_queue_xid(int gpu, unsigned long long xid, unsigned gi, unsigned ci, double at) {
    if (g_sim.npending >= SIM_MAX_PENDING) return -1;
    sim_xid *e = &g_sim.pending[g_sim.npending++];
    e->gpu = gpu;
    e->xid = xid;
    e->gi = gi;
    e->ci = ci;
    e->at = at < 0 ? g_sim.last_t : at;
    return 0;
}

/* ------------------------------------------------------------------ hang faults */

static struct timespec to_timespec(double t) {
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Called with the lock held, at the start of a call of `fn` on GPU `gpu` (-1: no device).
 * When an armed hang matches and is due, blocks for its for_s of wall time on a condition,
 * which releases the lock meanwhile: other threads (the event wait, other devices, the
 * control functions) go on. Returns with the lock held again; the caller then answers from
 * the state as it is after the hang (which may have changed: shut down, GPU lost, ...). */
static void maybe_hang(int fn, int gpu) {
    if (!g_sim.nhangs) return;
    sim_sync();
    double for_s = -1;
    for (unsigned i = 0; i < g_sim.nhangs; i++) {
        const sim_hang *h = &g_sim.hangs[i];
        if (h->fn == fn && (h->gpu < 0 || h->gpu == gpu) && g_sim.last_t >= h->at &&
            h->for_s > for_s)
            for_s = h->for_s;
    }
    if (for_s < 0) return;
    struct timespec until = to_timespec(sim_mono_now() + for_s);
    unsigned long long epoch = g_hang_epoch;
    g_hanging++;
    while (g_hang_epoch == epoch)
        if (pthread_cond_timedwait(&g_hang_cond, &g_mu, &until) == ETIMEDOUT) break;
    g_hanging--;
    sim_sync();
}

unsigned sim_end_hangs(void) {
    g_hang_epoch++;
    pthread_cond_broadcast(&g_hang_cond);
    return g_hanging;
}

unsigned sim_hanging_calls(void) { return g_hanging; }

/* ------------------------------------------------------------------ call prologue */

typedef enum { H_ANY, H_PHYS, H_MIG } handle_kind;

static int handle_gpu(nvmlDevice_t d) {
    uintptr_t p = (uintptr_t)d;
    uintptr_t g0 = (uintptr_t)&g_gpu_handles[0], g1 = (uintptr_t)&g_gpu_handles[SIM_MAX_GPUS];
    uintptr_t m0 = (uintptr_t)&g_mig_handles[0][0];
    uintptr_t m1 = (uintptr_t)&g_mig_handles[SIM_MAX_GPUS - 1][SIM_MAX_MIG];
    if (p >= g0 && p < g1 && (p - g0) % sizeof(struct nvmlDevice_st) == 0) return d->gpu;
    if (p >= m0 && p < m1 && (p - m0) % sizeof(struct nvmlDevice_st) == 0) return d->gpu;
    return -1;
}

/* The GPU_IS_LOST state machine, evaluated on every call that reaches the device. */
static int check_lost(sim_gpu *g) {
    double t = g_sim.last_t;
    if (!g->lost) {
        if (g->lost_at >= 0 && t >= g->lost_at) {
            g->lost = 1;
            g->lost_since = g->lost_at;
            g->lost_at = -1;
        } else if (g->lost_after_calls == 0) {
            g->lost = 1;
            g->lost_since = t;
            g->lost_after_calls = -1;
        } else if (g->lost_after_calls > 0) {
            g->lost_after_calls--;
        }
    }
    if (g->lost && g->lost_for >= 0 && t >= g->lost_since + g->lost_for) {
        g->lost = 0;
        g->lost_for = -1;
    }
    return g->lost;
}

static int override_for(int fn, int gpu) {
    if (gpu >= 0 && g_sim.override_gpu[gpu][fn]) return g_sim.override_gpu[gpu][fn];
    return g_sim.override_all[fn];
}

/* Locks; the caller must end with finish(). */
static nvmlReturn_t begin_call(int fn) {
    lock();
    g_sim.calls[fn][0]++;
    if (g_sim.init_refcount) maybe_hang(fn, -1);
    if (!g_sim.init_refcount) return NVML_ERROR_UNINITIALIZED;
    sim_sync();
    return (nvmlReturn_t)override_for(fn, -1);
}

/* Locks and resolves a device handle; the caller must end with finish(). */
static nvmlReturn_t begin_device(int fn, nvmlDevice_t d, handle_kind kind, sim_gpu **out,
                                 int *slot) {
    lock();
    int gpu = handle_gpu(d);
    g_sim.calls[fn][gpu >= 0 ? gpu + 1 : 0]++;
    if (g_sim.init_refcount && gpu >= 0) maybe_hang(fn, gpu);
    if (!g_sim.init_refcount) return NVML_ERROR_UNINITIALIZED;
    if (gpu < 0 || (unsigned)gpu >= g_sim.ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    sim_gpu *g = &g_sim.gpus[gpu];
    /* a MIG handle dies with its instance or when MIG mode goes off */
    if (d->slot >= 0 && (!g->cis[d->slot].used || !g->mig_mode)) return NVML_ERROR_INVALID_ARGUMENT;
    sim_sync();
    if (check_lost(g)) return NVML_ERROR_GPU_IS_LOST;
    int ov = override_for(fn, gpu);
    if (ov) return (nvmlReturn_t)ov;
    if (kind == H_PHYS && d->slot >= 0) return NVML_ERROR_NOT_SUPPORTED;
    if (kind == H_MIG && d->slot < 0) return NVML_ERROR_NOT_SUPPORTED;
    *out = g;
    *slot = d->slot;
    return NVML_SUCCESS;
}

static int mig_active(const sim_gpu *g) { return g->mig_capable && g->mig_mode == 1; }

nvmlReturn_t sim_begin_call(int fn) { return begin_call(fn); }

nvmlReturn_t sim_begin_device(int fn, nvmlDevice_t d, int physical, sim_gpu **g, int *slot) {
    return begin_device(fn, d, physical ? H_PHYS : H_ANY, g, slot);
}

nvmlReturn_t sim_finish(nvmlReturn_t r) { return finish(r); }

int sim_mig_active(const sim_gpu *g) { return mig_active(g); }

/* Whether a GPU is lost as another GPU's call sees it: no call is counted on it. */
int sim_peer_lost(const sim_gpu *g) {
    return g->lost || (g->lost_at >= 0 && g_sim.last_t >= g->lost_at) || g->lost_after_calls == 0;
}

static int has_instances(const sim_gpu *g) {
    for (int i = 0; i < SIM_MAX_GI; i++)
        if (g->gis[i].used) return 1;
    return 0;
}

static nvmlReturn_t copy_string(char *dst, unsigned length, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ init and system */

static int load_from_env(void) {
    const char *path = getenv("NVMLSIM_SCENARIO");
    if (!path || !*path) return sim_load_scenario_text("{}", "default scenario");
    FILE *f = fopen(path, "rb");
    if (!f) {
        sim_set_error("%s: cannot open scenario named by NVMLSIM_SCENARIO: %s", path,
                      strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    while (text) {
        if (len + 4096 > cap) {
            char *grown = (cap > (64u << 20)) ? NULL : realloc(text, cap * 2);
            if (!grown) {
                free(text);
                text = NULL;
                break;
            }
            text = grown;
            cap *= 2;
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    fclose(f);
    if (!text) {
        sim_set_error("%s: scenario too large or out of memory", path);
        return -1;
    }
    text[len] = '\0';
    int rc = sim_load_scenario_text(text, path);
    free(text);
    return rc;
}

int sim_ensure_loaded(void) { return g_sim.loaded ? 0 : load_from_env(); }

void sim_lock(void) { lock(); }

void sim_unlock(void) { pthread_mutex_unlock(&g_mu); }

void sim_wake_waiters(void) { pthread_cond_broadcast(&g_cond); }

static nvmlReturn_t do_init(int fn) {
    lock();
    g_sim.calls[fn][0]++;
    if (sim_ensure_loaded()) {
        /* the caller only sees UNKNOWN, so say why where a person will look */
        fprintf(stderr, "nvmlsim: %s\n", g_sim.last_error);
        return finish(NVML_ERROR_UNKNOWN);
    }
    maybe_hang(fn, -1);
    sim_sync();
    int ov = override_for(fn, -1);
    if (ov) return finish((nvmlReturn_t)ov);
    if (g_sim.init_fail_code) {
        int failing = g_sim.init_fail_until >= 0 ? g_sim.last_t < g_sim.init_fail_until
                                                 : g_sim.init_fail_remaining != 0;
        if (failing) {
            if (g_sim.init_fail_remaining > 0) g_sim.init_fail_remaining--;
            return finish((nvmlReturn_t)g_sim.init_fail_code);
        }
    }
    g_sim.init_refcount++;
    return finish(NVML_SUCCESS);
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return do_init(FN_nvmlInitWithFlags);
}

nvmlReturn_t nvmlInit_v2(void) { return do_init(FN_nvmlInit_v2); }

nvmlReturn_t nvmlInit(void) { return do_init(FN_nvmlInit); }

nvmlReturn_t nvmlShutdown(void) {
    lock();
    g_sim.calls[FN_nvmlShutdown][0]++;
    if (g_sim.init_refcount) maybe_hang(FN_nvmlShutdown, -1);
    if (!g_sim.init_refcount) return finish(NVML_ERROR_UNINITIALIZED);
    int ov = override_for(FN_nvmlShutdown, -1);
    if (ov) return finish((nvmlReturn_t)ov);
    g_sim.init_refcount--;
    pthread_cond_broadcast(&g_cond); /* blocked event waits see the library go down */
    return finish(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t result) {
    lock();
    g_sim.calls[FN_nvmlErrorString][0]++;
    pthread_mutex_unlock(&g_mu);
    switch ((int)result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_NOT_READY: return "System not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "No GPUs were found";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    nvmlReturn_t r = begin_call(FN_nvmlSystemGetDriverVersion);
    if (r == NVML_SUCCESS) r = copy_string(version, length, g_sim.driver_version);
    return finish(r);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    /* like the real library, answers before nvmlInit */
    lock();
    g_sim.calls[FN_nvmlSystemGetNVMLVersion][0]++;
    maybe_hang(FN_nvmlSystemGetNVMLVersion, -1);
    int ov = override_for(FN_nvmlSystemGetNVMLVersion, -1);
    if (ov) return finish((nvmlReturn_t)ov);
    return finish(copy_string(version, length, g_sim.nvml_version));
}

static nvmlReturn_t get_count(int fn, unsigned int *count) {
    nvmlReturn_t r = begin_call(fn);
    if (r == NVML_SUCCESS) {
        if (!count) r = NVML_ERROR_INVALID_ARGUMENT;
        else *count = g_sim.ngpus;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    return get_count(FN_nvmlDeviceGetCount_v2, deviceCount);
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) {
    return get_count(FN_nvmlDeviceGetCount, deviceCount);
}

static nvmlReturn_t handle_by_index(int fn, unsigned index, nvmlDevice_t *device) {
    lock();
    g_sim.calls[fn][index < SIM_MAX_GPUS ? index + 1 : 0]++;
    if (g_sim.init_refcount && index < SIM_MAX_GPUS) maybe_hang(fn, (int)index);
    if (!g_sim.init_refcount) return finish(NVML_ERROR_UNINITIALIZED);
    if (index >= g_sim.ngpus || !device) return finish(NVML_ERROR_INVALID_ARGUMENT);
    sim_sync();
    if (check_lost(&g_sim.gpus[index])) return finish(NVML_ERROR_GPU_IS_LOST);
    int ov = override_for(fn, (int)index);
    if (ov) return finish((nvmlReturn_t)ov);
    *device = &g_gpu_handles[index];
    return finish(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    return handle_by_index(FN_nvmlDeviceGetHandleByIndex_v2, index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return handle_by_index(FN_nvmlDeviceGetHandleByIndex, index, device);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    nvmlReturn_t r = begin_call(FN_nvmlDeviceGetHandleByUUID);
    if (r != NVML_SUCCESS) return finish(r);
    if (!uuid || !device) return finish(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < g_sim.ngpus; i++) {
        sim_gpu *g = &g_sim.gpus[i];
        nvmlDevice_t found = NULL;
        if (strcmp(g->uuid, uuid) == 0) found = &g_gpu_handles[i];
        for (int s = 0; !found && s < SIM_MAX_MIG; s++)
            if (g->cis[s].used && mig_active(g) && strcmp(g->cis[s].uuid, uuid) == 0)
                found = &g_mig_handles[i][s];
        if (found) {
            if (check_lost(g)) return finish(NVML_ERROR_GPU_IS_LOST);
            *device = found;
            return finish(NVML_SUCCESS);
        }
    }
    return finish(NVML_ERROR_NOT_FOUND);
}

/* ------------------------------------------------------------------ identity */

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetIndex, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!index) r = NVML_ERROR_INVALID_ARGUMENT;
        else *index = (unsigned)(g - g_sim.gpus);
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetMinorNumber, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!minorNumber) r = NVML_ERROR_INVALID_ARGUMENT;
        else *minorNumber = g->minor;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetUUID, device, H_ANY, &g, &slot);
    if (r == NVML_SUCCESS) r = copy_string(uuid, length, slot >= 0 ? g->cis[slot].uuid : g->uuid);
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetName, device, H_ANY, &g, &slot);
    if (r == NVML_SUCCESS) r = copy_string(name, length, slot >= 0 ? g->cis[slot].name : g->name);
    return finish(r);
}

static nvmlReturn_t pci_info(int fn, nvmlDevice_t device, nvmlPciInfo_t *pci) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(fn, device, H_ANY, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!pci) return finish(NVML_ERROR_INVALID_ARGUMENT);
        unsigned dom = 0, bus = 0, dev = 0, func = 0;
        sscanf(g->bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &func);
        memset(pci, 0, sizeof *pci);
        pci->domain = dom;
        pci->bus = bus;
        pci->device = dev;
        pci->pciDeviceId = g->pci_device_id;
        pci->pciSubSystemId = g->pci_subsystem_id;
        snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, dom, bus, dev);
        snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
                 dom & 0xFFFF, bus, dev);
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return pci_info(FN_nvmlDeviceGetPciInfo_v3, device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return pci_info(FN_nvmlDeviceGetPciInfo_v2, device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    return pci_info(FN_nvmlDeviceGetPciInfo, device, pci);
}

/* ------------------------------------------------------------------ MIG */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetMigMode, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!currentMode || !pendingMode) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (!g->mig_capable) r = NVML_ERROR_NOT_SUPPORTED;
        else {
            *currentMode = g->mig_mode;
            *pendingMode = g->mig_pending;
        }
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetMaxMigDeviceCount, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!count) r = NVML_ERROR_INVALID_ARGUMENT;
        else *count = g->mig_capable ? g->max_mig : 0;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r =
        begin_device(FN_nvmlDeviceGetMigDeviceHandleByIndex, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!migDevice) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (!g->mig_capable) r = NVML_ERROR_NOT_SUPPORTED;
        else if (index >= g->max_mig || index >= SIM_MAX_MIG) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (!mig_active(g) || !g->cis[index].used) r = NVML_ERROR_NOT_FOUND;
        else *migDevice = &g_mig_handles[g - g_sim.gpus][index];
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceIsMigDeviceHandle, device, H_ANY, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!isMigDevice) r = NVML_ERROR_INVALID_ARGUMENT;
        else *isMigDevice = slot >= 0;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetGpuInstanceId, device, H_MIG, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!id) r = NVML_ERROR_INVALID_ARGUMENT;
        else *id = g->gis[g->cis[slot].gi_slot].id;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetComputeInstanceId, device, H_MIG, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!id) r = NVML_ERROR_INVALID_ARGUMENT;
        else *id = g->cis[slot].ci_id;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetDeviceHandleFromMigDeviceHandle, migDevice,
                                  H_MIG, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!device) r = NVML_ERROR_INVALID_ARGUMENT;
        else *device = &g_gpu_handles[g - g_sim.gpus];
    }
    return finish(r);
}

/* NVML's GPU instance profile id (nvidia-smi mig -lgip's ID): for a plain `<g>g.<n>gb` profile
 * by slice count, as the built-in node numbers them (api_identity.gpu_instance_profile_id);
 * a variant (`+me`, `-me`, `+gfx`) gets an id of its own, 32 + the first slot holding that
 * profile, so that two variants of one size never share an id. */
static unsigned gi_profile_id(const sim_gpu *g, int slot) {
    const sim_gi *gi = &g->gis[slot];
    if (!strpbrk(gi->profile, "+-")) {
        switch (gi->slices) {
        case 1: return 19;
        case 2: return 14;
        case 3: return 9;
        case 4: return 5;
        case 7: return 0;
        default: break;
        }
    }
    for (int s = 0; s < SIM_MAX_GI; s++)
        if (g->gis[s].used && strcmp(g->gis[s].profile, gi->profile) == 0) return 32u + (unsigned)s;
    return 32u + (unsigned)slot;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t *gpuInstance) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetGpuInstanceById, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!gpuInstance) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (!g->mig_capable) r = NVML_ERROR_NOT_SUPPORTED;
        else if (!mig_active(g)) r = NVML_ERROR_INVALID_STATE;
        else {
            r = NVML_ERROR_NOT_FOUND;
            for (int s = 0; s < SIM_MAX_GI; s++) {
                if (g->gis[s].used && g->gis[s].id == id) {
                    *gpuInstance = &g_gi_handles[g - g_sim.gpus][s];
                    r = NVML_SUCCESS;
                    break;
                }
            }
        }
    }
    return finish(r);
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
    nvmlReturn_t r = begin_call(FN_nvmlGpuInstanceGetInfo);
    if (r != NVML_SUCCESS) return finish(r);
    uintptr_t first = (uintptr_t)&g_gi_handles[0][0];
    uintptr_t at = (uintptr_t)gpuInstance;
    if (!info || at < first || at >= first + sizeof g_gi_handles ||
        (at - first) % sizeof g_gi_handles[0][0])
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    if ((unsigned)gpuInstance->gpu >= g_sim.ngpus) return finish(NVML_ERROR_INVALID_ARGUMENT);
    sim_gpu *g = &g_sim.gpus[gpuInstance->gpu];
    const sim_gi *gi = &g->gis[gpuInstance->slot];
    if (!mig_active(g) || !gi->used) return finish(NVML_ERROR_INVALID_ARGUMENT);
    memset(info, 0, sizeof *info);
    info->device = &g_gpu_handles[gpuInstance->gpu];
    info->id = gi->id;
    info->profileId = gi_profile_id(g, gpuInstance->slot);
    return finish(NVML_SUCCESS);
}

/* The profile's v2 info, for the profiles the GPU's layout uses; its name as nvidia-smi
 * prints it ("MIG 3g.71gb"), as the built-in node answers. */
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                      nvmlGpuInstanceProfileInfo_v2_t *info) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetGpuInstanceProfileInfoByIdV, device, H_PHYS,
                                  &g, &slot);
    if (r != NVML_SUCCESS) return finish(r);
    if (!info) return finish(NVML_ERROR_INVALID_ARGUMENT);
    if (!g->mig_capable) return finish(NVML_ERROR_NOT_SUPPORTED);
    for (int s = 0; s < SIM_MAX_GI; s++) {
        const sim_gi *gi = &g->gis[s];
        if (!gi->used || gi_profile_id(g, s) != profileId) continue;
        unsigned version = info->version;
        memset(info, 0, sizeof *info);
        info->version = version;
        info->id = profileId;
        info->sliceCount = gi->slices;
        info->memorySizeMB = gi->mem_total / MIB;
        snprintf(info->name, sizeof info->name, "MIG %s", gi->profile);
        return finish(NVML_SUCCESS);
    }
    return finish(NVML_ERROR_NOT_SUPPORTED);
}

static nvmlReturn_t attributes(int fn, nvmlDevice_t device, nvmlDeviceAttributes_t *a) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(fn, device, H_MIG, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!a) return finish(NVML_ERROR_INVALID_ARGUMENT);
        const sim_ci *ci = &g->cis[slot];
        const sim_gi *gi = &g->gis[ci->gi_slot];
        memset(a, 0, sizeof *a);
        a->multiprocessorCount = ci->slices * g->sms_per_slice;
        a->sharedCopyEngineCount = gi->slices;
        a->sharedDecoderCount = gi->slices;
        a->sharedJpegCount = gi->slices;
        a->gpuInstanceSliceCount = gi->slices;
        a->computeInstanceSliceCount = ci->slices;
        a->memorySizeMB = gi->mem_total / MIB;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes_) {
    return attributes(FN_nvmlDeviceGetAttributes_v2, device, attributes_);
}

nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes_) {
    return attributes(FN_nvmlDeviceGetAttributes, device, attributes_);
}

/* ------------------------------------------------------------------ physical values */

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                    unsigned int *clock) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetClockInfo, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!clock) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (type == NVML_CLOCK_SM || type == NVML_CLOCK_GRAPHICS) *clock = g->sm_clock;
        else if (type == NVML_CLOCK_MEM) *clock = g->mem_clock;
        else if (type == NVML_CLOCK_VIDEO) {
            sim_number v;
            if (sim_value_get(g, "call:nvmlDeviceGetClockInfo(3)", &v)) r = NVML_ERROR_NOT_SUPPORTED;
            else *clock = (unsigned)v;
        }
        else r = NVML_ERROR_INVALID_ARGUMENT;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetTemperature, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!temp || sensorType != NVML_TEMPERATURE_GPU) r = NVML_ERROR_INVALID_ARGUMENT;
        else *temp = g->temp;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetPowerUsage, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!power) r = NVML_ERROR_INVALID_ARGUMENT;
        else *power = (unsigned)llround(g->power_mw);
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r =
        begin_device(FN_nvmlDeviceGetPowerManagementLimit, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!limit) r = NVML_ERROR_INVALID_ARGUMENT;
        else *limit = g->power_limit_mw;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r =
        begin_device(FN_nvmlDeviceGetTotalEnergyConsumption, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!energy) r = NVML_ERROR_INVALID_ARGUMENT;
        else *energy = (unsigned long long)floor(g->energy_mj);
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetPcieReplayCounter, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!value) r = NVML_ERROR_INVALID_ARGUMENT;
        else *value = g->pcie_replay;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetUtilizationRates, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!utilization) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (mig_active(g)) r = NVML_ERROR_NOT_SUPPORTED;
        else {
            utilization->gpu = g->util_gpu;
            utilization->memory = g->util_mem;
        }
    }
    return finish(r);
}

static nvmlReturn_t codec_util(int fn, nvmlDevice_t device, unsigned *util, unsigned *period,
                               int encoder) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(fn, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!util || !period) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (mig_active(g)) r = NVML_ERROR_NOT_SUPPORTED;
        else {
            *util = encoder ? g->util_enc : g->util_dec;
            *period = 167000;
        }
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    return codec_util(FN_nvmlDeviceGetEncoderUtilization, device, utilization, samplingPeriodUs,
                      1);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    return codec_util(FN_nvmlDeviceGetDecoderUtilization, device, utilization, samplingPeriodUs,
                      0);
}

/* Framebuffer of the physical GPU, or of the MIG device's GPU instance. */
static void memory_of(const sim_gpu *g, int slot, unsigned long long *total,
                      unsigned long long *reserved, unsigned long long *used) {
    if (slot >= 0) {
        const sim_gi *gi = &g->gis[g->cis[slot].gi_slot];
        *total = gi->mem_total;
        *reserved = gi->mem_reserved;
        *used = gi->mem_used;
    } else {
        *total = g->mem_total;
        *reserved = g->mem_reserved;
        *used = g->mem_used;
    }
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetMemoryInfo, device, H_ANY, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!memory) return finish(NVML_ERROR_INVALID_ARGUMENT);
        unsigned long long total, reserved, used;
        memory_of(g, slot, &total, &reserved, &used);
        memory->total = total;
        memory->used = used + reserved; /* v1 counts reserved memory as used */
        memory->free = total - used - reserved;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetMemoryInfo_v2, device, H_ANY, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!memory) return finish(NVML_ERROR_INVALID_ARGUMENT);
        if (memory->version != nvmlMemory_v2) return finish(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        unsigned long long total, reserved, used;
        memory_of(g, slot, &total, &reserved, &used);
        memory->total = total;
        memory->reserved = reserved;
        memory->used = used;
        memory->free = total - used - reserved;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetRemappedRows, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!corrRows || !uncRows || !isPending || !failureOccurred)
            r = NVML_ERROR_INVALID_ARGUMENT;
        else if (mig_active(g) && has_instances(g)) r = NVML_ERROR_NOT_SUPPORTED;
        else {
            *corrRows = g->remap_corr;
            *uncRows = g->remap_unc;
            *isPending = g->remap_pending;
            *failureOccurred = g->remap_failure;
        }
    }
    return finish(r);
}

static nvmlReturn_t clock_events(int fn, nvmlDevice_t device, unsigned long long *reasons) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(fn, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!reasons) r = NVML_ERROR_INVALID_ARGUMENT;
        else *reasons = g->clock_event_reasons;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long *clocksEventReasons) {
    return clock_events(FN_nvmlDeviceGetCurrentClocksEventReasons, device, clocksEventReasons);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long *clocksThrottleReasons) {
    return clock_events(FN_nvmlDeviceGetCurrentClocksThrottleReasons, device,
                        clocksThrottleReasons);
}

static long long wall_us(void) {
    return (long long)((g_sim.wall0 + (g_sim.last_t - g_sim.t_start)) * 1e6);
}

/* A "fields" value set for this entry: exact scope first, then any scope. Integral values
 * answer as unsigned (signed when negative) long long, others as double. */
static int fill_generic_field(const sim_gpu *g, nvmlFieldValue_t *v) {
    char key[SIM_VALUE_KEY];
    sim_number value;
    snprintf(key, sizeof key, "fi:%u@%u", v->fieldId, v->scopeId);
    if (sim_value_get(g, key, &value)) {
        snprintf(key, sizeof key, "fi:%u", v->fieldId);
        if (sim_value_get(g, key, &value)) return 0;
    }
    v->nvmlReturn = NVML_SUCCESS;
    if (value == floorl(value) && value >= -9223372036854775808.0L &&
        value < 18446744073709551616.0L) {
        if (value >= 0) {
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
            v->value.ullVal = (unsigned long long)value;
        } else {
            v->valueType = NVML_VALUE_TYPE_SIGNED_LONG_LONG;
            v->value.sllVal = (long long)value;
        }
    } else {
        v->valueType = NVML_VALUE_TYPE_DOUBLE;
        v->value.dVal = (double)value;
    }
    return 1;
}

static void fill_field(const sim_gpu *g, nvmlFieldValue_t *v) {
    for (unsigned i = 0; i < g->nfield_ret; i++)
        if (g->field_ret_id[i] == v->fieldId && g->field_ret_code[i]) {
            v->nvmlReturn = (nvmlReturn_t)g->field_ret_code[i];
            return;
        }
    if (fill_generic_field(g, v)) return;
    unsigned long long ull = 0;
    int is_uint = 0;
    switch (v->fieldId) {
    case NVML_FI_DEV_ECC_SBE_VOL_TOTAL: ull = g->ecc_sbe_vol; break;
    case NVML_FI_DEV_ECC_DBE_VOL_TOTAL: ull = g->ecc_dbe_vol; break;
    case NVML_FI_DEV_ECC_SBE_AGG_TOTAL: ull = g->ecc_sbe_agg; break;
    case NVML_FI_DEV_ECC_DBE_AGG_TOTAL: ull = g->ecc_dbe_agg; break;
    case NVML_FI_DEV_RETIRED_SBE: ull = g->retired_sbe; break;
    case NVML_FI_DEV_RETIRED_DBE: ull = g->retired_dbe; break;
    case NVML_FI_DEV_RETIRED_PENDING: ull = g->retired_pending; break;
    case NVML_FI_DEV_PERF_POLICY_POWER: ull = g->viol_power; break;
    case NVML_FI_DEV_PERF_POLICY_THERMAL: ull = g->viol_thermal; break;
    case NVML_FI_DEV_PERF_POLICY_SYNC_BOOST: ull = g->viol_sync_boost; break;
    case NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT: ull = g->viol_board_limit; break;
    case NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION: ull = g->viol_low_util; break;
    case NVML_FI_DEV_PERF_POLICY_RELIABILITY: ull = g->viol_reliability; break;
    case NVML_FI_DEV_MEMORY_TEMP:
        ull = g->mem_temp;
        is_uint = 1;
        break;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: {
        /* NVLink queries are refused while MIG is on, as on real parts */
        if (!g->nvlink_links || mig_active(g)) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            return;
        }
        double total = v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? g->nvlink_tx_kib
                                                                            : g->nvlink_rx_kib;
        if (v->scopeId == SIM_NO_ID) ull = (unsigned long long)floor(total);
        else if (v->scopeId < g->nvlink_links)
            ull = (unsigned long long)floor(total / g->nvlink_links);
        else {
            v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
            return;
        }
        break;
    }
    default:
        v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return;
    }
    v->nvmlReturn = NVML_SUCCESS;
    if (is_uint) {
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = (unsigned)ull;
    } else {
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v->value.ullVal = ull;
    }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                      nvmlFieldValue_t *values) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetFieldValues, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (valuesCount < 0 || (valuesCount > 0 && !values)) return finish(NVML_ERROR_INVALID_ARGUMENT);
        long long ts = wall_us();
        for (int i = 0; i < valuesCount; i++) {
            nvmlFieldValue_t *v = &values[i];
            v->timestamp = ts;
            v->latencyUsec = 0;
            memset(&v->value, 0, sizeof v->value);
            fill_field(g, v);
        }
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType,
                                         unsigned long long *eccCounts) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetTotalEccErrors, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        int corrected = errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED;
        int volatile_ = counterType == NVML_VOLATILE_ECC;
        if (!eccCounts ||
            (errorType != NVML_MEMORY_ERROR_TYPE_CORRECTED &&
             errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED) ||
            (counterType != NVML_VOLATILE_ECC && counterType != NVML_AGGREGATE_ECC))
            r = NVML_ERROR_INVALID_ARGUMENT;
        else if (corrected) *eccCounts = volatile_ ? g->ecc_sbe_vol : g->ecc_sbe_agg;
        else *eccCounts = volatile_ ? g->ecc_dbe_vol : g->ecc_dbe_agg;
    }
    return finish(r);
}

/* ------------------------------------------------------------------ GPM */

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlGpmQueryDeviceSupport, device, H_ANY, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!gpmSupport) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
            r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        else gpmSupport->isSupportedDevice = g->gpm_supported ? 1 : 0;
    }
    return finish(r);
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample) {
    nvmlReturn_t r = begin_call(FN_nvmlGpmSampleAlloc);
    if (r == NVML_SUCCESS) {
        if (!gpmSample) return finish(NVML_ERROR_INVALID_ARGUMENT);
        struct nvmlGpmSample_st *s = calloc(1, sizeof *s);
        if (!s) return finish(NVML_ERROR_MEMORY);
        s->magic = SAMPLE_MAGIC;
        *gpmSample = s;
    }
    return finish(r);
}

static int valid_sample(nvmlGpmSample_t s) { return s && s->magic == SAMPLE_MAGIC; }

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
    nvmlReturn_t r = begin_call(FN_nvmlGpmSampleFree);
    if (r == NVML_SUCCESS) {
        if (!valid_sample(gpmSample)) return finish(NVML_ERROR_INVALID_ARGUMENT);
        gpmSample->magic = 0;
        free(gpmSample);
    }
    return finish(r);
}

static void take_sample(nvmlGpmSample_t s, const sim_gpu *g, int kind, int ref,
                        const sim_gpm_scope *scope) {
    s->filled = 1;
    s->gpu = (int)(g - g_sim.gpus);
    s->generation = g->generation;
    s->kind = kind;
    s->ref = ref;
    s->t = g_sim.last_t;
    s->n = scope->n;
    memcpy(s->id, scope->id, sizeof s->id);
    memcpy(s->integral, scope->integral, sizeof s->integral);
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlGpmSampleGet, device, H_ANY, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!valid_sample(gpmSample)) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (!g->gpm_supported) r = NVML_ERROR_NOT_SUPPORTED;
        else if (slot < 0) take_sample(gpmSample, g, 0, 0, &g->gpm);
        else {
            /* a MIG device handle samples its compute instance */
            const sim_ci *ci = &g->cis[slot];
            take_sample(gpmSample, g, 2, slot, ci->own_gpm ? &ci->gpm : &g->gis[ci->gi_slot].gpm);
        }
    }
    return finish(r);
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId,
                                 nvmlGpmSample_t gpmSample) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlGpmMigSampleGet, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!valid_sample(gpmSample)) return finish(NVML_ERROR_INVALID_ARGUMENT);
        if (!g->gpm_supported || !mig_active(g)) return finish(NVML_ERROR_NOT_SUPPORTED);
        for (int i = 0; i < SIM_MAX_GI; i++)
            if (g->gis[i].used && g->gis[i].id == gpuInstanceId) {
                take_sample(gpmSample, g, 1, (int)gpuInstanceId, &g->gis[i].gpm);
                return finish(NVML_SUCCESS);
            }
        r = NVML_ERROR_NOT_FOUND;
    }
    return finish(r);
}

static void metric_info(unsigned id, nvmlGpmMetric_t *m) {
    static const struct {
        unsigned id;
        const char *short_name, *long_name, *unit;
    } k[] = {
        {NVML_GPM_METRIC_GRAPHICS_UTIL, "gr_util", "graphics engine utilization", "%"},
        {NVML_GPM_METRIC_SM_UTIL, "sm_util", "SM utilization", "%"},
        {NVML_GPM_METRIC_SM_OCCUPANCY, "sm_occupancy", "SM occupancy", "%"},
        {NVML_GPM_METRIC_ANY_TENSOR_UTIL, "tensor_util", "any tensor pipe utilization", "%"},
        {NVML_GPM_METRIC_DRAM_BW_UTIL, "dram_bw_util", "DRAM bandwidth utilization", "%"},
        {NVML_GPM_METRIC_FP64_UTIL, "fp64_util", "FP64 pipe utilization", "%"},
        {NVML_GPM_METRIC_FP32_UTIL, "fp32_util", "FP32 pipe utilization", "%"},
        {NVML_GPM_METRIC_FP16_UTIL, "fp16_util", "FP16 pipe utilization", "%"},
        {NVML_GPM_METRIC_PCIE_TX_PER_SEC, "pcie_tx", "PCIe transmit bandwidth", "MiB/s"},
        {NVML_GPM_METRIC_PCIE_RX_PER_SEC, "pcie_rx", "PCIe receive bandwidth", "MiB/s"},
        {NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, "nvlink_rx", "NVLink receive bandwidth",
         "MiB/s"},
        {NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, "nvlink_tx", "NVLink transmit bandwidth",
         "MiB/s"},
    };
    m->metricInfo.shortName = m->metricInfo.longName = m->metricInfo.unit = NULL;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].id == id) {
            m->metricInfo.shortName = (char *)k[i].short_name;
            m->metricInfo.longName = (char *)k[i].long_name;
            m->metricInfo.unit = (char *)k[i].unit;
        }
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet) {
    lock();
    int gpu = (metricsGet && valid_sample(metricsGet->sample1) && metricsGet->sample1->filled)
                  ? metricsGet->sample1->gpu
                  : -1;
    g_sim.calls[FN_nvmlGpmMetricsGet][gpu >= 0 ? gpu + 1 : 0]++;
    if (g_sim.init_refcount) maybe_hang(FN_nvmlGpmMetricsGet, gpu);
    if (!g_sim.init_refcount) return finish(NVML_ERROR_UNINITIALIZED);
    sim_sync();
    int ov = override_for(FN_nvmlGpmMetricsGet, gpu);
    if (ov) return finish((nvmlReturn_t)ov);
    if (!metricsGet) return finish(NVML_ERROR_INVALID_ARGUMENT);
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION)
        return finish(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    const struct nvmlGpmSample_st *a = metricsGet->sample1, *b = metricsGet->sample2;
    if (!valid_sample(metricsGet->sample1) || !valid_sample(metricsGet->sample2) || !a->filled ||
        !b->filled || metricsGet->numMetrics > NVML_GPM_METRIC_MAX)
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    /* both samples must come from one scope of one layout, in time order */
    if (a->gpu != b->gpu || a->kind != b->kind || a->ref != b->ref ||
        a->generation != b->generation || (unsigned)a->gpu >= g_sim.ngpus ||
        a->generation != g_sim.gpus[a->gpu].generation || !(b->t > a->t))
        return finish(NVML_ERROR_INVALID_ARGUMENT);
    double dt = b->t - a->t;
    for (unsigned i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *m = &metricsGet->metrics[i];
        int ia = -1, ib = -1;
        for (unsigned k = 0; k < a->n; k++)
            if (a->id[k] == m->metricId) ia = (int)k;
        for (unsigned k = 0; k < b->n; k++)
            if (b->id[k] == m->metricId) ib = (int)k;
        metric_info(m->metricId, m);
        if (ia < 0 || ib < 0) {
            m->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            m->value = 0.0;
            continue;
        }
        m->nvmlReturn = NVML_SUCCESS;
        m->value = (b->integral[ib] - a->integral[ia]) / dt;
    }
    return finish(NVML_SUCCESS);
}

/* ------------------------------------------------------------------ events */

static int valid_set(nvmlEventSet_t set) {
    uintptr_t p = (uintptr_t)set, s0 = (uintptr_t)&g_sim.sets[0];
    uintptr_t s1 = (uintptr_t)&g_sim.sets[SIM_MAX_SETS];
    return p >= s0 && p < s1 && (p - s0) % sizeof(struct nvmlEventSet_st) == 0 && set->used;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    nvmlReturn_t r = begin_call(FN_nvmlEventSetCreate);
    if (r != NVML_SUCCESS) return finish(r);
    if (!set) return finish(NVML_ERROR_INVALID_ARGUMENT);
    for (int i = 0; i < SIM_MAX_SETS; i++)
        if (!g_sim.sets[i].used) {
            memset(&g_sim.sets[i], 0, sizeof g_sim.sets[i]);
            g_sim.sets[i].used = 1;
            *set = &g_sim.sets[i];
            return finish(NVML_SUCCESS);
        }
    return finish(NVML_ERROR_INSUFFICIENT_RESOURCES);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceRegisterEvents, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!valid_set(set)) r = NVML_ERROR_INVALID_ARGUMENT;
        else if (eventTypes & ~(unsigned long long)nvmlEventTypeXidCriticalError)
            r = NVML_ERROR_NOT_SUPPORTED;
        else set->mask[g - g_sim.gpus] |= eventTypes;
    }
    return finish(r);
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r =
        begin_device(FN_nvmlDeviceGetSupportedEventTypes, device, H_PHYS, &g, &slot);
    if (r == NVML_SUCCESS) {
        if (!eventTypes) r = NVML_ERROR_INVALID_ARGUMENT;
        else *eventTypes = nvmlEventTypeXidCriticalError;
    }
    return finish(r);
}

/* Blocks on the condition (which releases the mutex) until an event reaches this set, the
 * timeout passes, or the library shuts down. In real-clock mode it also wakes when the next
 * scheduled XID falls due. */
static nvmlReturn_t event_wait(int fn, nvmlEventSet_t set, nvmlEventData_t *data,
                               unsigned timeoutms) {
    nvmlReturn_t r = begin_call(fn);
    if (r != NVML_SUCCESS) return finish(r);
    if (!valid_set(set) || !data) return finish(NVML_ERROR_INVALID_ARGUMENT);
    double deadline = sim_mono_now() + timeoutms / 1000.0;
    for (;;) {
        sim_sync();
        if (!g_sim.init_refcount) return finish(NVML_ERROR_UNINITIALIZED);
        if (!set->used) return finish(NVML_ERROR_INVALID_ARGUMENT);
        if (set->count) {
            sim_xid e = set->queue[set->head];
            set->head = (set->head + 1) % SIM_SET_QUEUE;
            set->count--;
            memset(data, 0, sizeof *data);
            data->device = &g_gpu_handles[e.gpu];
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = e.xid;
            data->gpuInstanceId = e.gi;
            data->computeInstanceId = e.ci;
            return finish(NVML_SUCCESS);
        }
        double now = sim_mono_now();
        if (now >= deadline) return finish(NVML_ERROR_TIMEOUT);
        double wake = deadline;
        if (!g_sim.manual)
            for (unsigned i = 0; i < g_sim.npending; i++) {
                double due = g_sim.mono0 + (g_sim.pending[i].at - g_sim.t_start) / g_sim.speed;
                due += 0.0005; /* land just after the due time, not a hair before */
                if (due < wake) wake = due;
            }
        struct timespec ts = to_timespec(wake);
        pthread_cond_timedwait(&g_cond, &g_mu, &ts);
    }
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeoutms) {
    return event_wait(FN_nvmlEventSetWait_v2, set, data, timeoutms);
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    return event_wait(FN_nvmlEventSetWait, set, data, timeoutms);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    nvmlReturn_t r = begin_call(FN_nvmlEventSetFree);
    if (r != NVML_SUCCESS) return finish(r);
    if (!valid_set(set)) return finish(NVML_ERROR_INVALID_ARGUMENT);
    set->used = 0;
    pthread_cond_broadcast(&g_cond);
    return finish(NVML_SUCCESS);
}

/* ------------------------------------------------------------------ processes */

/* The compute call lists the processes that are not MPS clients, the MPS call the clients. */
static nvmlReturn_t running_processes(int fn, nvmlDevice_t device, unsigned int *infoCount,
                                      nvmlProcessInfo_t *infos, int mps) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(fn, device, H_ANY, &g, &slot);
    if (r != NVML_SUCCESS) return finish(r);
    if (!infoCount) return finish(NVML_ERROR_INVALID_ARGUMENT);
    /* a MIG device handle sees only the processes of its own compute instance */
    const sim_proc *match[SIM_MAX_PROCS];
    unsigned n = 0;
    for (unsigned i = 0; i < g->nprocs; i++) {
        const sim_proc *p = &g->procs[i];
        if (p->mps != mps) continue;
        if (slot >= 0) {
            const sim_ci *ci = &g->cis[slot];
            if (p->gi != g->gis[ci->gi_slot].id || p->ci != ci->ci_id) continue;
        }
        match[n++] = p;
    }
    if (n == 0) {
        *infoCount = 0;
        return finish(NVML_SUCCESS);
    }
    if (!infos || *infoCount < n) {
        *infoCount = n;
        return finish(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    for (unsigned i = 0; i < n; i++) {
        memset(&infos[i], 0, sizeof infos[i]);
        infos[i].pid = match[i]->pid;
        infos[i].usedGpuMemory = match[i]->used_bytes;
        infos[i].gpuInstanceId = match[i]->gi;
        infos[i].computeInstanceId = match[i]->ci;
    }
    *infoCount = n;
    return finish(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos) {
    return running_processes(FN_nvmlDeviceGetComputeRunningProcesses_v3, device, infoCount,
                             infos, 0);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                        unsigned int *infoCount,
                                                        nvmlProcessInfo_t *infos) {
    return running_processes(FN_nvmlDeviceGetMPSComputeRunningProcesses_v3, device, infoCount,
                             infos, 1);
}

/* The CPU timestamp (µs) of a sample taken at simulated time `at`, on wall_us's scale. */
static unsigned long long sample_us(double at) {
    return (unsigned long long)((g_sim.wall0 + (at - g_sim.t_start)) * 1e6);
}

static void fill_sample(nvmlProcessUtilizationSample_t *out, unsigned pid, unsigned long long ts,
                        unsigned sm, unsigned mem, unsigned enc, unsigned dec) {
    out->pid = pid;
    out->timeStamp = ts;
    out->smUtil = sm;
    out->memUtil = mem;
    out->encUtil = enc;
    out->decUtil = dec;
}

nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *processSamplesCount,
                                             unsigned long long lastSeenTimeStamp) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r =
        begin_device(FN_nvmlDeviceGetProcessUtilization, device, H_PHYS, &g, &slot);
    if (r != NVML_SUCCESS) return finish(r);
    if (!processSamplesCount) return finish(NVML_ERROR_INVALID_ARGUMENT);
    if (mig_active(g)) return finish(NVML_ERROR_NOT_SUPPORTED);
    /* A process with *_util values has one sample stamped now (CPU time in microseconds);
     * one with timed "samples" has those taken by now. Only stamps newer than
     * lastSeenTimeStamp count, as in NVML's sample buffer. */
    unsigned long long now = (unsigned long long)wall_us();
    unsigned n = 0;
    for (unsigned i = 0; i < g->nprocs; i++) {
        const sim_proc *p = &g->procs[i];
        if (p->has_util && now > lastSeenTimeStamp) n++;
        for (unsigned j = 0; j < p->nsamples; j++)
            if (p->samples[j].at <= g_sim.last_t && sample_us(p->samples[j].at) > lastSeenTimeStamp)
                n++;
    }
    if (n == 0) return finish(NVML_ERROR_NOT_FOUND);
    if (!utilization || *processSamplesCount < n) {
        *processSamplesCount = n;
        return finish(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned k = 0;
    for (unsigned i = 0; i < g->nprocs; i++) {
        const sim_proc *p = &g->procs[i];
        if (p->has_util && now > lastSeenTimeStamp)
            fill_sample(&utilization[k++], p->pid, now, p->sm_util, p->mem_util, p->enc_util,
                        p->dec_util);
        for (unsigned j = 0; j < p->nsamples; j++) {
            const sim_proc_sample *s = &p->samples[j];
            unsigned long long ts = sample_us(s->at);
            if (s->at <= g_sim.last_t && ts > lastSeenTimeStamp)
                fill_sample(&utilization[k++], p->pid, ts, s->sm_util, s->mem_util, s->enc_util,
                            s->dec_util);
        }
    }
    *processSamplesCount = k;
    return finish(NVML_SUCCESS);
}

/* The driver's GPU and memory utilisation samples: with "utilization_samples", each one whose
 * at_s has been reached, stamped at at_s; without, one stamped now from gpu_util/memory_util.
 * Only stamps newer than lastSeenTimeStamp count; none is NOT_FOUND. With samples NULL the
 * count is answered (as pynvml's first call expects). */
nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                  unsigned long long lastSeenTimeStamp,
                                  nvmlValueType_t *sampleValType, unsigned int *sampleCount,
                                  nvmlSample_t *samples) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = begin_device(FN_nvmlDeviceGetSamples, device, H_PHYS, &g, &slot);
    if (r != NVML_SUCCESS) return finish(r);
    if (!sampleCount || !sampleValType) return finish(NVML_ERROR_INVALID_ARGUMENT);
    if (mig_active(g)) return finish(NVML_ERROR_NOT_SUPPORTED);
    if (type != NVML_GPU_UTILIZATION_SAMPLES && type != NVML_MEMORY_UTILIZATION_SAMPLES)
        return finish(NVML_ERROR_NOT_SUPPORTED);
    int memory = type == NVML_MEMORY_UTILIZATION_SAMPLES;
    unsigned long long stamps[SIM_MAX_UTIL_SAMPLES];
    unsigned values[SIM_MAX_UTIL_SAMPLES];
    unsigned n = 0;
    if (g->nutil_samples == 0) {
        unsigned long long now = (unsigned long long)wall_us();
        if (now > lastSeenTimeStamp) {
            stamps[n] = now;
            values[n++] = memory ? g->util_mem : g->util_gpu;
        }
    }
    for (unsigned i = 0; i < g->nutil_samples; i++) {
        const sim_util_sample *u = &g->util_samples[i];
        unsigned long long ts = sample_us(u->at);
        if (u->at <= g_sim.last_t && ts > lastSeenTimeStamp) {
            stamps[n] = ts;
            values[n++] = memory ? u->mem_util : u->gpu_util;
        }
    }
    if (n == 0) return finish(NVML_ERROR_NOT_FOUND);
    *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (!samples) {
        *sampleCount = n;
        return finish(NVML_SUCCESS);
    }
    if (*sampleCount == 0) return finish(NVML_ERROR_INVALID_ARGUMENT);
    unsigned k = n < *sampleCount ? n : *sampleCount;
    for (unsigned i = 0; i < k; i++) {
        memset(&samples[i], 0, sizeof samples[i]);
        samples[i].timeStamp = stamps[i];
        samples[i].sampleValue.uiVal = values[i];
    }
    *sampleCount = k;
    return finish(NVML_SUCCESS);
}
