/* Scenario handling: defaults, and applying a parsed JSON scenario (or a patch of one
 * device) onto the simulated state. Every error names the JSON path and line. */
#define _GNU_SOURCE
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_state.h"

sim_state g_sim;

const char *const g_fn_names[SIM_FN_COUNT] = {
#define SIM_FN_NAME(name) #name,
    SIM_FUNCTIONS(SIM_FN_NAME)
#undef SIM_FN_NAME
};

#define MIB 1048576.0

/* ------------------------------------------------------------------ helpers */

void sim_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_sim.last_error, sizeof g_sim.last_error, fmt, ap);
    va_end(ap);
}

double sim_mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double sim_wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int sim_function_index(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < SIM_FN_COUNT; i++)
        if (strcmp(g_fn_names[i], name) == 0) return i;
    return -1;
}

static const struct {
    const char *name;
    int code;
} k_return_names[] = {
    {"SUCCESS", NVML_SUCCESS},
    {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED},
    {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT},
    {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED},
    {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
    {"NOT_FOUND", NVML_ERROR_NOT_FOUND},
    {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE},
    {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
    {"TIMEOUT", NVML_ERROR_TIMEOUT},
    {"LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND},
    {"FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND},
    {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST},
    {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED},
    {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH},
    {"NO_DATA", NVML_ERROR_NO_DATA},
    {"ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH},
    {"NOT_READY", NVML_ERROR_NOT_READY},
    {"GPU_NOT_FOUND", NVML_ERROR_GPU_NOT_FOUND},
    {"UNKNOWN", NVML_ERROR_UNKNOWN},
};

int sim_return_code_from_name(const char *name) {
    if (strncmp(name, "NVML_ERROR_", 11) == 0) name += 11;
    for (size_t i = 0; i < sizeof k_return_names / sizeof k_return_names[0]; i++)
        if (strcmp(k_return_names[i].name, name) == 0) return k_return_names[i].code;
    return -1;
}

int sim_gpm_find(const sim_gpm_scope *scope, unsigned id) {
    for (unsigned i = 0; i < scope->n; i++)
        if (scope->id[i] == id) return (int)i;
    return -1;
}

int sim_gpm_set(sim_gpm_scope *scope, unsigned id, double value) {
    int i = sim_gpm_find(scope, id);
    if (i < 0) {
        if (scope->n >= SIM_MAX_GPM) return -1;
        i = (int)scope->n++;
        scope->id[i] = id;
        scope->integral[i] = 0.0;
    }
    scope->value[i] = value;
    return 0;
}

int sim_value_get(const sim_gpu *g, const char *key, sim_number *out) {
    for (unsigned i = 0; i < g->nvalues; i++)
        if (strcmp(g->values[i].key, key) == 0) {
            *out = g->values[i].value;
            return 0;
        }
    return -1;
}

int sim_value_set(sim_gpu *g, const char *key, sim_number value) {
    if (strlen(key) >= SIM_VALUE_KEY) return -1;
    for (unsigned i = 0; i < g->nvalues; i++)
        if (strcmp(g->values[i].key, key) == 0) {
            g->values[i].value = value;
            return 0;
        }
    if (g->nvalues >= SIM_MAX_VALUES) return -1;
    snprintf(g->values[g->nvalues].key, SIM_VALUE_KEY, "%s", key);
    g->values[g->nvalues++].value = value;
    return 0;
}

const char *sim_string_get(const sim_gpu *g, const char *key) {
    for (unsigned i = 0; i < g->nstrings; i++)
        if (strcmp(g->strings[i].key, key) == 0) return g->strings[i].value;
    return NULL;
}

/* Error context: a JSON path such as "devices[1].mig[0]" plus the node's position. */
typedef struct {
    const char *origin;
    char path[160];
} ctx_t;

static int err_at(const ctx_t *c, const sj_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int err_at(const ctx_t *c, const sj_node *n, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sim_set_error("%s: line %d, column %d: %s%s%s", c->origin, n ? n->line : 0, n ? n->col : 0,
                  c->path, c->path[0] ? ": " : "", msg);
    return -1;
}

static void sub_ctx(ctx_t *out, const ctx_t *in, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sub_ctx(ctx_t *out, const ctx_t *in, const char *fmt, ...) {
    out->origin = in->origin;
    size_t len = strlen(in->path);
    memcpy(out->path, in->path, len + 1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->path + len, sizeof out->path - len, fmt, ap);
    va_end(ap);
}

static int want(const ctx_t *c, const sj_node *n, sj_type type) {
    if (n->type == type) return 0;
    if (n->key)
        return err_at(c, n, "\"%s\" must be %s, not %s", n->key, sj_type_name(type),
                      sj_type_name(n->type));
    return err_at(c, n, "expected %s, not %s", sj_type_name(type), sj_type_name(n->type));
}

static int get_number(const ctx_t *c, const sj_node *n, double lo, double hi, double *out) {
    if (n->type == SJ_BOOL) {
        *out = n->num;
        return 0;
    }
    if (want(c, n, SJ_NUM)) return -1;
    if (!(n->num >= lo && n->num <= hi))
        return err_at(c, n, "\"%s\" is %g, expected a number in [%g, %g]", n->key ? n->key : "",
                      n->num, lo, hi);
    *out = n->num;
    return 0;
}

static int get_string(const ctx_t *c, const sj_node *n, char *dst, size_t cap) {
    if (want(c, n, SJ_STR)) return -1;
    if (strlen(n->str) >= cap)
        return err_at(c, n, "\"%s\" is longer than %zu characters", n->key ? n->key : "",
                      cap - 1);
    strcpy(dst, n->str);
    return 0;
}

/* A return code given as a number or as a name ("NOT_SUPPORTED", "NVML_ERROR_GPU_IS_LOST"). */
static int get_return_code(const ctx_t *c, const sj_node *n, int *out) {
    if (n->type == SJ_NUM) {
        if (n->num < 0 || n->num > 999 || n->num != floor(n->num))
            return err_at(c, n, "return code %g is not an nvmlReturn_t value", n->num);
        *out = (int)n->num;
        return 0;
    }
    if (n->type == SJ_STR) {
        int code = sim_return_code_from_name(n->str);
        if (code < 0) return err_at(c, n, "unknown return code name \"%s\"", n->str);
        *out = code;
        return 0;
    }
    return err_at(c, n, "a return code must be a number or a name such as \"NOT_SUPPORTED\"");
}

static int parse_uint_key(const ctx_t *c, const sj_node *n, unsigned *out) {
    char *end = NULL;
    unsigned long v = strtoul(n->key, &end, 10);
    if (!n->key[0] || *end != '\0' || v > 0xFFFFFFFFul)
        return err_at(c, n, "member name \"%s\" must be a decimal id", n->key);
    *out = (unsigned)v;
    return 0;
}

/* ------------------------------------------------------------------ numeric keys */

typedef enum { K_U32, K_U64, K_DBL } ktype;
typedef struct {
    const char *key;
    size_t off;
    ktype type;
    double scale; /* stored = given x scale */
} numkey;

#define GK(k, f, t, s) {k, offsetof(sim_gpu, f), t, s}
static const numkey k_gpu_keys[] = {
    GK("sm_clock_mhz", sm_clock, K_U32, 1),
    GK("mem_clock_mhz", mem_clock, K_U32, 1),
    GK("temperature_c", temp, K_U32, 1),
    GK("memory_temperature_c", mem_temp, K_U32, 1),
    GK("power_w", power_mw, K_DBL, 1000),
    GK("power_mw", power_mw, K_DBL, 1),
    GK("power_limit_w", power_limit_mw, K_U32, 1000),
    GK("power_limit_mw", power_limit_mw, K_U32, 1),
    GK("energy_mj", energy_mj, K_DBL, 1),
    GK("pcie_replay", pcie_replay, K_U32, 1),
    GK("gpu_util", util_gpu, K_U32, 1),
    GK("memory_util", util_mem, K_U32, 1),
    GK("encoder_util", util_enc, K_U32, 1),
    GK("decoder_util", util_dec, K_U32, 1),
    GK("memory_total_bytes", mem_total, K_U64, 1),
    GK("memory_total_mib", mem_total, K_U64, MIB),
    GK("memory_used_bytes", mem_used, K_U64, 1),
    GK("memory_used_mib", mem_used, K_U64, MIB),
    GK("memory_reserved_bytes", mem_reserved, K_U64, 1),
    GK("memory_reserved_mib", mem_reserved, K_U64, MIB),
    GK("ecc_sbe_volatile", ecc_sbe_vol, K_U64, 1),
    GK("ecc_dbe_volatile", ecc_dbe_vol, K_U64, 1),
    GK("ecc_sbe_aggregate", ecc_sbe_agg, K_U64, 1),
    GK("ecc_dbe_aggregate", ecc_dbe_agg, K_U64, 1),
    GK("remapped_rows_correctable", remap_corr, K_U32, 1),
    GK("remapped_rows_uncorrectable", remap_unc, K_U32, 1),
    GK("remap_pending", remap_pending, K_U32, 1),
    GK("remap_failure", remap_failure, K_U32, 1),
    GK("retired_pages_sbe", retired_sbe, K_U64, 1),
    GK("retired_pages_dbe", retired_dbe, K_U64, 1),
    GK("retired_pages_pending", retired_pending, K_U64, 1),
    GK("violation_power_ns", viol_power, K_U64, 1),
    GK("violation_thermal_ns", viol_thermal, K_U64, 1),
    GK("violation_sync_boost_ns", viol_sync_boost, K_U64, 1),
    GK("violation_board_limit_ns", viol_board_limit, K_U64, 1),
    GK("violation_low_util_ns", viol_low_util, K_U64, 1),
    GK("violation_reliability_ns", viol_reliability, K_U64, 1),
    GK("nvlink_tx_kib", nvlink_tx_kib, K_DBL, 1),
    GK("nvlink_rx_kib", nvlink_rx_kib, K_DBL, 1),
    GK("nvlink_tx_kib_per_s", nvlink_tx_kib_per_s, K_DBL, 1),
    GK("nvlink_rx_kib_per_s", nvlink_rx_kib_per_s, K_DBL, 1),
    GK("nvlink_links", nvlink_links, K_U32, 1),
    GK("clock_event_reasons", clock_event_reasons, K_U64, 1),
    GK("mig_capable", mig_capable, K_U32, 1),
    GK("mig_mode", mig_mode, K_U32, 1),
    GK("mig_mode_pending", mig_pending, K_U32, 1),
    GK("max_mig_devices", max_mig, K_U32, 1),
    GK("gpm_supported", gpm_supported, K_U32, 1),
    GK("multiprocessors", multiprocessors, K_U32, 1),
    GK("sms_per_slice", sms_per_slice, K_U32, 1),
    GK("pci_device_id", pci_device_id, K_U32, 1),
    GK("pci_subsystem_id", pci_subsystem_id, K_U32, 1),
    GK("minor_number", minor, K_U32, 1),
};
#undef GK

#define IK(k, f, t, s) {k, offsetof(sim_gi, f), t, s}
static const numkey k_gi_keys[] = {
    IK("slices", slices, K_U32, 1),
    IK("memory_total_bytes", mem_total, K_U64, 1),
    IK("memory_total_mib", mem_total, K_U64, MIB),
    IK("memory_used_bytes", mem_used, K_U64, 1),
    IK("memory_used_mib", mem_used, K_U64, MIB),
    IK("memory_reserved_bytes", mem_reserved, K_U64, 1),
    IK("memory_reserved_mib", mem_reserved, K_U64, MIB),
};
#undef IK

static const numkey *find_key(const numkey *table, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(table[i].key, key) == 0) return &table[i];
    return NULL;
}

/* Stores value x scale into the field; returns a message on a range problem, else NULL. */
static const char *store_number(void *base, const numkey *k, double value) {
    double v = value * k->scale;
    char *field = (char *)base + k->off;
    switch (k->type) {
    case K_U32:
        if (!(v >= 0 && v <= 4294967295.0)) return "expected a value in the unsigned 32-bit range";
        *(unsigned *)field = (unsigned)llround(v);
        return NULL;
    case K_U64:
        if (!(v >= 0 && v <= 1.8e19)) return "expected a non-negative value";
        *(unsigned long long *)field = (unsigned long long)llround(v);
        return NULL;
    case K_DBL:
        if (!isfinite(v) || v < 0) return "expected a finite non-negative value";
        *(double *)field = v;
        return NULL;
    }
    return "internal error";
}

/* ------------------------------------------------------------------ defaults */

static const unsigned k_bus_numbers[SIM_MAX_GPUS] = {0x19, 0x3B, 0x4C, 0x5D, 0x9B, 0xBB,
                                                     0xCB, 0xDB, 0x1A, 0x3C, 0x4D, 0x5E,
                                                     0x9C, 0xBC, 0xCC, 0xDC};

static const unsigned k_default_gpm_ids[] = {1, 2, 3, 5, 10, 11, 12, 13, 20, 21, 60, 61};

static void default_gpm(sim_gpm_scope *scope);

static void default_gpu(sim_gpu *g, unsigned index) {
    memset(g, 0, sizeof *g);
    snprintf(g->name, sizeof g->name, "NVIDIA H200");
    snprintf(g->uuid, sizeof g->uuid, "GPU-5e1a%04x-0000-4000-8000-%012x", index, index);
    snprintf(g->bus_id, sizeof g->bus_id, "00000000:%02X:00.0", k_bus_numbers[index]);
    g->pci_device_id = 0x233510DE;
    g->pci_subsystem_id = 0x18A810DE;
    g->minor = index;
    g->sm_clock = 1980;
    g->mem_clock = 3201;
    g->temp = 34;
    g->mem_temp = 40;
    g->power_mw = 120000.0;
    g->power_limit_mw = 700000;
    g->mem_total = 143771ull * 1048576ull;
    g->mem_reserved = 614ull * 1048576ull;
    g->mem_used = 55ull * 1048576ull;
    g->nvlink_links = 18;
    g->mig_capable = 1;
    g->max_mig = 7;
    g->gpm_supported = 1;
    g->multiprocessors = 132;
    g->sms_per_slice = 16;
    default_gpm(&g->gpm);
    g->lost_at = -1;
    g->lost_after_calls = -1;
    g->lost_for = -1;
}

void sim_reset_state(void) {
    memset(&g_sim, 0, sizeof g_sim);
    snprintf(g_sim.driver_version, sizeof g_sim.driver_version, "590.48.01");
    snprintf(g_sim.nvml_version, sizeof g_sim.nvml_version, "13.590.48.01");
    g_sim.speed = 1.0;
    g_sim.mono0 = sim_mono_now();
    g_sim.wall0 = sim_wall_now();
    g_sim.init_fail_until = -1;
    g_sim.ngpus = 1;
    for (unsigned i = 0; i < SIM_MAX_GPUS; i++) default_gpu(&g_sim.gpus[i], i);
}

/* ------------------------------------------------------------------ MIG layout */

/* "3g.71gb" -> 3; "1c.3g.71gb" -> 1 (compute slices); 0 when the pattern is absent. */
static unsigned leading_count(const char *profile, char unit) {
    char *end = NULL;
    unsigned long v = strtoul(profile, &end, 10);
    if (end == profile || *end != unit) return 0;
    return (unsigned)v;
}

static unsigned long long default_gi_memory(const char *profile) {
    static const struct {
        const char *profile;
        unsigned mib;
    } known[] = {
        /* H200 figures from a real nvidia-smi capture */
        {"1g.18gb", 16384}, {"1g.35gb", 33280}, {"2g.35gb", 33280},
        {"3g.71gb", 71424}, {"4g.71gb", 71424}, {"7g.141gb", 143104},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(known[i].profile, profile) == 0) return known[i].mib * 1048576ull;
    const char *dot = strchr(profile, '.');
    unsigned gb = dot ? (unsigned)strtoul(dot + 1, NULL, 10) : 0;
    return (unsigned long long)(gb * 1024u * 0.93) * 1048576ull;
}

/* A "gpm" map is the scope's complete set of supported metrics; metrics that stay keep their
 * integrals so samples taken before a patch remain comparable. */
static int apply_gpm_map(const ctx_t *c, const sj_node *obj, sim_gpm_scope *scope) {
    if (want(c, obj, SJ_OBJ)) return -1;
    sim_gpm_scope next = {0};
    for (const sj_node *m = obj->child; m; m = m->next) {
        unsigned id;
        double v;
        if (parse_uint_key(c, m, &id) || get_number(c, m, 0, 1e15, &v)) return -1;
        if (id == 0 || id >= NVML_GPM_METRIC_MAX)
            return err_at(c, m, "GPM metric id %u is outside 1..%d", id, NVML_GPM_METRIC_MAX - 1);
        if (sim_gpm_set(&next, id, v)) return err_at(c, m, "more than %d GPM metrics", SIM_MAX_GPM);
        int old = sim_gpm_find(scope, id);
        if (old >= 0) next.integral[sim_gpm_find(&next, id)] = scope->integral[old];
    }
    *scope = next;
    return 0;
}

static void default_gpm(sim_gpm_scope *scope) {
    memset(scope, 0, sizeof *scope);
    for (size_t i = 0; i < sizeof k_default_gpm_ids / sizeof k_default_gpm_ids[0]; i++)
        sim_gpm_set(scope, k_default_gpm_ids[i], 0.0);
}

static int first_free_slot(const sim_gpu *g) {
    for (unsigned s = 0; s < g->max_mig && s < SIM_MAX_MIG; s++)
        if (!g->cis[s].used) return (int)s;
    return -1;
}

static int apply_compute_instance(const ctx_t *c, const sj_node *obj, sim_gpu *g, int gi_slot,
                                  unsigned gpu_index) {
    if (want(c, obj, SJ_OBJ)) return -1;
    const sim_gi *gi = &g->gis[gi_slot];
    int slot = -1;
    const sj_node *idx = NULL;
    for (const sj_node *m = obj->child; m; m = m->next)
        if (strcmp(m->key, "index") == 0) idx = m;
    if (idx) {
        double v;
        if (get_number(c, idx, 0, SIM_MAX_MIG - 1, &v)) return -1;
        slot = (int)v;
        if ((unsigned)slot >= g->max_mig)
            return err_at(c, idx, "MIG device index %d is not below max_mig_devices (%u)", slot,
                          g->max_mig);
        if (g->cis[slot].used) return err_at(c, idx, "MIG device index %d is used twice", slot);
    } else {
        slot = first_free_slot(g);
        if (slot < 0) return err_at(c, obj, "no free MIG device index left (max_mig_devices %u)",
                                    g->max_mig);
    }
    sim_ci *ci = &g->cis[slot];
    memset(ci, 0, sizeof *ci);
    ci->used = 1;
    ci->gi_slot = gi_slot;
    memcpy(ci->profile, gi->profile, sizeof gi->profile); /* 32 of 48 bytes, NUL included */
    int have_name = 0, have_uuid = 0, have_slices = 0, have_ci = 0;
    for (const sj_node *m = obj->child; m; m = m->next) {
        if (strcmp(m->key, "index") == 0) continue;
        if (strcmp(m->key, "ci") == 0) {
            double v;
            if (get_number(c, m, 0, 1000, &v)) return -1;
            ci->ci_id = (unsigned)v;
            have_ci = 1;
        } else if (strcmp(m->key, "profile") == 0) {
            if (get_string(c, m, ci->profile, sizeof ci->profile)) return -1;
        } else if (strcmp(m->key, "name") == 0) {
            if (get_string(c, m, ci->name, sizeof ci->name)) return -1;
            have_name = 1;
        } else if (strcmp(m->key, "uuid") == 0) {
            if (get_string(c, m, ci->uuid, sizeof ci->uuid)) return -1;
            have_uuid = 1;
        } else if (strcmp(m->key, "slices") == 0) {
            double v;
            if (get_number(c, m, 1, 8, &v)) return -1;
            ci->slices = (unsigned)v;
            have_slices = 1;
        } else if (strcmp(m->key, "gpm") == 0) {
            if (apply_gpm_map(c, m, &ci->gpm)) return -1;
            ci->own_gpm = 1;
        } else {
            return err_at(c, m, "unknown compute-instance key \"%s\" (expected index, ci, "
                          "profile, name, uuid, slices, gpm)", m->key);
        }
    }
    (void)have_ci;
    if (!have_name) {
        /* NVML names a MIG device "<GPU name> MIG <profile>" */
        char name[sizeof ci->name];
        snprintf(name, sizeof name, "%.55s MIG %.35s", g->name, ci->profile);
        memcpy(ci->name, name, sizeof name);
    }
    if (!have_uuid)
        snprintf(ci->uuid, sizeof ci->uuid, "MIG-5e1a%04x-%04x-4000-8000-%012x", gpu_index,
                 gi->id, ci->ci_id);
    if (!have_slices) {
        unsigned cs = leading_count(ci->profile, 'c');
        ci->slices = cs ? cs : gi->slices;
    }
    return 0;
}

static int apply_gpu_instance(const ctx_t *c, const sj_node *obj, sim_gpu *g, unsigned gpu_index) {
    if (want(c, obj, SJ_OBJ)) return -1;
    int gi_slot = -1;
    for (int i = 0; i < SIM_MAX_GI; i++)
        if (!g->gis[i].used) {
            gi_slot = i;
            break;
        }
    if (gi_slot < 0) return err_at(c, obj, "more than %d GPU instances", SIM_MAX_GI);
    sim_gi *gi = &g->gis[gi_slot];
    memset(gi, 0, sizeof *gi);
    gi->used = 1;
    default_gpm(&gi->gpm);
    const sj_node *cis = NULL;
    int have_id = 0, have_slices = 0, have_total = 0, have_profile = 0;
    for (const sj_node *m = obj->child; m; m = m->next) {
        const numkey *k = find_key(k_gi_keys, sizeof k_gi_keys / sizeof k_gi_keys[0], m->key);
        if (strcmp(m->key, "gi") == 0) {
            double v;
            if (get_number(c, m, 0, 1000, &v)) return -1;
            gi->id = (unsigned)v;
            have_id = 1;
        } else if (strcmp(m->key, "profile") == 0) {
            if (get_string(c, m, gi->profile, sizeof gi->profile)) return -1;
            have_profile = 1;
        } else if (strcmp(m->key, "gpm") == 0) {
            if (apply_gpm_map(c, m, &gi->gpm)) return -1;
        } else if (strcmp(m->key, "compute_instances") == 0) {
            if (want(c, m, SJ_ARR)) return -1;
            cis = m;
        } else if (k) {
            double v;
            if (get_number(c, m, 0, 1e18, &v)) return -1;
            const char *problem = store_number(gi, k, v);
            if (problem) return err_at(c, m, "\"%s\": %s", m->key, problem);
            if (strcmp(m->key, "slices") == 0) have_slices = 1;
            if (strncmp(m->key, "memory_total", 12) == 0) have_total = 1;
        } else {
            return err_at(c, m, "unknown GPU-instance key \"%s\" (expected gi, profile, slices, "
                          "memory_{total,used,reserved}_{mib,bytes}, gpm, compute_instances)",
                          m->key);
        }
    }
    if (!have_id) return err_at(c, obj, "a GPU instance needs \"gi\" (its NVML GPU instance id)");
    if (!have_profile) return err_at(c, obj, "a GPU instance needs \"profile\", e.g. \"1g.18gb\"");
    for (int i = 0; i < SIM_MAX_GI; i++)
        if (i != gi_slot && g->gis[i].used && g->gis[i].id == gi->id)
            return err_at(c, obj, "GPU instance id %u is used twice", gi->id);
    if (!have_slices) gi->slices = leading_count(gi->profile, 'g');
    if (!have_total) gi->mem_total = default_gi_memory(gi->profile);
    if (gi->mem_used + gi->mem_reserved > gi->mem_total)
        return err_at(c, obj, "GPU instance memory used + reserved exceeds its total");
    if (!cis || !cis->child) {
        /* one compute instance spanning the whole GPU instance */
        sj_node empty = {.type = SJ_OBJ, .line = obj->line, .col = obj->col};
        ctx_t sc;
        sub_ctx(&sc, c, ".compute_instances[0]");
        return apply_compute_instance(&sc, &empty, g, gi_slot, gpu_index);
    }
    int i = 0;
    for (const sj_node *e = cis->child; e; e = e->next, i++) {
        ctx_t sc;
        sub_ctx(&sc, c, ".compute_instances[%d]", i);
        if (apply_compute_instance(&sc, e, g, gi_slot, gpu_index)) return -1;
    }
    return 0;
}

/* "samples": [{"at_s", "sm_util", "mem_util", "enc_util", "dec_util"}], oldest first. */
static int apply_proc_samples(const ctx_t *c, const sj_node *arr, sim_proc *p) {
    if (want(c, arr, SJ_ARR)) return -1;
    p->nsamples = 0;
    int i = 0;
    for (const sj_node *e = arr->child; e; e = e->next, i++) {
        ctx_t sc;
        sub_ctx(&sc, c, ".samples[%d]", i);
        if (want(&sc, e, SJ_OBJ)) return -1;
        if (p->nsamples >= SIM_MAX_PROC_SAMPLES)
            return err_at(&sc, e, "more than %d samples", SIM_MAX_PROC_SAMPLES);
        sim_proc_sample *s = &p->samples[p->nsamples];
        memset(s, 0, sizeof *s);
        int have_at = 0;
        for (const sj_node *m = e->child; m; m = m->next) {
            double v;
            if (strcmp(m->key, "at_s") == 0) {
                if (get_number(&sc, m, 0, 1e12, &s->at)) return -1;
                have_at = 1;
                continue;
            }
            if (get_number(&sc, m, 0, 100, &v)) return -1;
            if (strcmp(m->key, "sm_util") == 0) s->sm_util = (unsigned)v;
            else if (strcmp(m->key, "mem_util") == 0) s->mem_util = (unsigned)v;
            else if (strcmp(m->key, "enc_util") == 0) s->enc_util = (unsigned)v;
            else if (strcmp(m->key, "dec_util") == 0) s->dec_util = (unsigned)v;
            else
                return err_at(&sc, m, "unknown sample key \"%s\" (expected at_s, sm_util, "
                              "mem_util, enc_util, dec_util)", m->key);
        }
        if (!have_at) return err_at(&sc, e, "a sample needs \"at_s\"");
        if (p->nsamples && s->at <= p->samples[p->nsamples - 1].at)
            return err_at(&sc, e, "samples must be in increasing \"at_s\"");
        p->nsamples++;
    }
    return 0;
}

/* "utilization_samples": [{"at_s", "gpu_util", "memory_util"}], oldest first: the samples
 * nvmlDeviceGetSamples answers, each once simulated time reaches its "at_s". */
static int apply_util_samples(const ctx_t *c, const sj_node *arr, sim_gpu *g) {
    if (want(c, arr, SJ_ARR)) return -1;
    g->nutil_samples = 0;
    int i = 0;
    for (const sj_node *e = arr->child; e; e = e->next, i++) {
        ctx_t sc;
        sub_ctx(&sc, c, ".utilization_samples[%d]", i);
        if (want(&sc, e, SJ_OBJ)) return -1;
        if (g->nutil_samples >= SIM_MAX_UTIL_SAMPLES)
            return err_at(&sc, e, "more than %d samples", SIM_MAX_UTIL_SAMPLES);
        sim_util_sample *s = &g->util_samples[g->nutil_samples];
        memset(s, 0, sizeof *s);
        int have_at = 0;
        for (const sj_node *m = e->child; m; m = m->next) {
            double v;
            if (strcmp(m->key, "at_s") == 0) {
                if (get_number(&sc, m, 0, 1e12, &s->at)) return -1;
                have_at = 1;
                continue;
            }
            if (get_number(&sc, m, 0, 100, &v)) return -1;
            if (strcmp(m->key, "gpu_util") == 0) s->gpu_util = (unsigned)v;
            else if (strcmp(m->key, "memory_util") == 0) s->mem_util = (unsigned)v;
            else
                return err_at(&sc, m, "unknown sample key \"%s\" (expected at_s, gpu_util, "
                              "memory_util)", m->key);
        }
        if (!have_at) return err_at(&sc, e, "a sample needs \"at_s\"");
        if (g->nutil_samples && s->at <= g->util_samples[g->nutil_samples - 1].at)
            return err_at(&sc, e, "samples must be in increasing \"at_s\"");
        g->nutil_samples++;
    }
    return 0;
}

static int apply_processes(const ctx_t *c, const sj_node *arr, sim_gpu *g) {
    if (want(c, arr, SJ_ARR)) return -1;
    g->nprocs = 0;
    int i = 0;
    for (const sj_node *e = arr->child; e; e = e->next, i++) {
        ctx_t sc;
        sub_ctx(&sc, c, ".processes[%d]", i);
        if (want(&sc, e, SJ_OBJ)) return -1;
        if (g->nprocs >= SIM_MAX_PROCS) return err_at(&sc, e, "more than %d processes", SIM_MAX_PROCS);
        sim_proc *p = &g->procs[g->nprocs];
        memset(p, 0, sizeof *p);
        p->gi = p->ci = SIM_NO_ID;
        int have_pid = 0;
        const sj_node *samples = NULL;
        for (const sj_node *m = e->child; m; m = m->next) {
            double v;
            if (strcmp(m->key, "samples") == 0) {
                if (apply_proc_samples(&sc, m, p)) return -1;
                samples = m;
                continue;
            }
            if (get_number(&sc, m, 0, 1.8e19, &v)) return -1;
            if (strcmp(m->key, "pid") == 0) {
                p->pid = (unsigned)v;
                have_pid = 1;
            } else if (strcmp(m->key, "used_bytes") == 0) p->used_bytes = (unsigned long long)v;
            else if (strcmp(m->key, "used_mib") == 0) p->used_bytes = (unsigned long long)(v * MIB);
            else if (strcmp(m->key, "gi") == 0) p->gi = (unsigned)v;
            else if (strcmp(m->key, "ci") == 0) p->ci = (unsigned)v;
            else if (strcmp(m->key, "mps") == 0) p->mps = v != 0;
            else if (strcmp(m->key, "sm_util") == 0) p->sm_util = (unsigned)v, p->has_util = 1;
            else if (strcmp(m->key, "mem_util") == 0) p->mem_util = (unsigned)v, p->has_util = 1;
            else if (strcmp(m->key, "enc_util") == 0) p->enc_util = (unsigned)v, p->has_util = 1;
            else if (strcmp(m->key, "dec_util") == 0) p->dec_util = (unsigned)v, p->has_util = 1;
            else
                return err_at(&sc, m, "unknown process key \"%s\" (expected pid, used_mib, "
                              "used_bytes, gi, ci, mps, sm_util, mem_util, enc_util, "
                              "dec_util, samples)", m->key);
        }
        if (!have_pid) return err_at(&sc, e, "a process needs \"pid\"");
        /* two sources of samples for one process would make the answer ambiguous */
        if (samples && p->has_util)
            return err_at(&sc, samples, "give either \"samples\" or *_util values, not both");
        g->nprocs++;
    }
    return 0;
}

static int apply_return_codes(const ctx_t *c, const sj_node *obj, int *table) {
    if (want(c, obj, SJ_OBJ)) return -1;
    for (const sj_node *m = obj->child; m; m = m->next) {
        int fn = sim_function_index(m->key);
        if (fn < 0) return err_at(c, m, "\"%s\" is not a function this library exports", m->key);
        int code;
        if (get_return_code(c, m, &code)) return -1;
        table[fn] = code;
    }
    return 0;
}

static int apply_lost(const ctx_t *c, const sj_node *obj, sim_gpu *g) {
    if (want(c, obj, SJ_OBJ)) return -1;
    for (const sj_node *m = obj->child; m; m = m->next) {
        double v;
        if (get_number(c, m, 0, 1e12, &v)) return -1;
        if (strcmp(m->key, "at_s") == 0) g->lost_at = v;
        else if (strcmp(m->key, "after_calls") == 0) g->lost_after_calls = (long long)v;
        else if (strcmp(m->key, "for_s") == 0) g->lost_for = v;
        else return err_at(c, m, "unknown key \"%s\" in lost (expected at_s, after_calls, for_s)",
                           m->key);
    }
    return 0;
}

/* Applies the members of one device object onto g; absent keys keep their values. */
/* "fields": {"<id>" or "<id>@<scope id>": number}; "calls": {"<function>(<args>)<pick>":
 * number}, the args without the device handle, e.g. "nvmlDeviceGetMaxClockInfo(1)",
 * "nvmlDeviceGetBAR1MemoryInfo().bar1Total", "nvmlDeviceGetCpuAffinity(4)[0]". */
static int apply_values(const ctx_t *c, const sj_node *obj, sim_gpu *g, const char *prefix) {
    if (want(c, obj, SJ_OBJ)) return -1;
    for (const sj_node *m = obj->child; m; m = m->next) {
        char key[SIM_VALUE_KEY];
        double v;
        /* the full 64-bit range, kept exactly (sim_number) */
        if (get_number(c, m, -9.3e18, 1.8446744073709552e19, &v)) return -1;
        sim_number exact = m->type == SJ_NUM ? m->wide : (sim_number)v;
        if (exact >= 18446744073709551616.0L)
            return err_at(c, m, "\"%s\" is above the unsigned 64-bit range", m->key);
        if (snprintf(key, sizeof key, "%s%s", prefix, m->key) >= (int)sizeof key)
            return err_at(c, m, "key \"%s\" is longer than %d characters", m->key,
                          SIM_VALUE_KEY - 6);
        if (strcmp(prefix, "fi:") == 0) {
            unsigned id, scope;
            char extra;
            if (sscanf(m->key, "%u@%u%c", &id, &scope, &extra) != 2 &&
                sscanf(m->key, "%u%c", &id, &extra) != 1)
                return err_at(c, m, "field key \"%s\" is not <id> or <id>@<scope id>", m->key);
        }
        if (sim_value_set(g, key, exact)) return err_at(c, m, "more than %d values", SIM_MAX_VALUES);
    }
    return 0;
}

/* "strings": {"<function>(<args>)": "text"}, as "calls" but for string answers. */
static int apply_strings(const ctx_t *c, const sj_node *obj, sim_gpu *g) {
    if (want(c, obj, SJ_OBJ)) return -1;
    g->nstrings = 0;
    for (const sj_node *m = obj->child; m; m = m->next) {
        if (g->nstrings >= SIM_MAX_STRINGS)
            return err_at(c, m, "more than %d strings", SIM_MAX_STRINGS);
        sim_string *e = &g->strings[g->nstrings];
        if (snprintf(e->key, sizeof e->key, "%s", m->key) >= (int)sizeof e->key)
            return err_at(c, m, "key \"%s\" is too long", m->key);
        if (get_string(c, m, e->value, sizeof e->value)) return -1;
        g->nstrings++;
    }
    return 0;
}

static int apply_device(const ctx_t *c, const sj_node *obj, unsigned index) {
    if (want(c, obj, SJ_OBJ)) return -1;
    sim_gpu *g = &g_sim.gpus[index];
    const sj_node *mig = NULL;
    int mig_mode_given = 0;
    for (const sj_node *m = obj->child; m; m = m->next) {
        const numkey *k = find_key(k_gpu_keys, sizeof k_gpu_keys / sizeof k_gpu_keys[0], m->key);
        if (k) {
            double v;
            if (get_number(c, m, 0, 1.8e19, &v)) return -1;
            const char *problem = store_number(g, k, v);
            if (problem) return err_at(c, m, "\"%s\": %s", m->key, problem);
            if (strcmp(m->key, "mig_mode") == 0) mig_mode_given = 1;
        } else if (strcmp(m->key, "name") == 0) {
            if (get_string(c, m, g->name, sizeof g->name)) return -1;
        } else if (strcmp(m->key, "uuid") == 0) {
            if (get_string(c, m, g->uuid, sizeof g->uuid)) return -1;
        } else if (strcmp(m->key, "pci_bus_id") == 0) {
            unsigned dom, bus, dev, fn;
            if (get_string(c, m, g->bus_id, sizeof g->bus_id)) return -1;
            if (sscanf(g->bus_id, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
                return err_at(c, m, "pci_bus_id \"%s\" is not DDDDDDDD:BB:DD.F", g->bus_id);
        } else if (strcmp(m->key, "gpm") == 0) {
            if (apply_gpm_map(c, m, &g->gpm)) return -1;
        } else if (strcmp(m->key, "mig") == 0) {
            if (want(c, m, SJ_ARR)) return -1;
            mig = m;
        } else if (strcmp(m->key, "processes") == 0) {
            if (apply_processes(c, m, g)) return -1;
        } else if (strcmp(m->key, "utilization_samples") == 0) {
            if (apply_util_samples(c, m, g)) return -1;
        } else if (strcmp(m->key, "return_codes") == 0) {
            if (apply_return_codes(c, m, g_sim.override_gpu[index])) return -1;
        } else if (strcmp(m->key, "field_returns") == 0) {
            if (want(c, m, SJ_OBJ)) return -1;
            g->nfield_ret = 0;
            for (const sj_node *f = m->child; f; f = f->next) {
                unsigned id;
                int code;
                if (parse_uint_key(c, f, &id) || get_return_code(c, f, &code)) return -1;
                if (g->nfield_ret >= SIM_MAX_FIELD_RET)
                    return err_at(c, f, "more than %d field_returns", SIM_MAX_FIELD_RET);
                g->field_ret_id[g->nfield_ret] = id;
                g->field_ret_code[g->nfield_ret++] = code;
            }
        } else if (strcmp(m->key, "lost") == 0) {
            if (apply_lost(c, m, g)) return -1;
        } else if (strcmp(m->key, "strings") == 0) {
            if (apply_strings(c, m, g)) return -1;
        } else if (strcmp(m->key, "fields") == 0 || strcmp(m->key, "calls") == 0) {
            if (apply_values(c, m, g, strcmp(m->key, "fields") == 0 ? "fi:" : "call:")) return -1;
        } else {
            return err_at(c, m, "unknown device key \"%s\" (see tests/nvmlsim/README.md)", m->key);
        }
    }
    if (g->max_mig > SIM_MAX_MIG)
        return err_at(c, obj, "max_mig_devices %u exceeds %d", g->max_mig, SIM_MAX_MIG);
    if (g->mem_used + g->mem_reserved > g->mem_total)
        return err_at(c, obj, "memory used + reserved exceeds memory total");
    if (mig) {
        memset(g->gis, 0, sizeof g->gis);
        memset(g->cis, 0, sizeof g->cis);
        int i = 0;
        for (const sj_node *e = mig->child; e; e = e->next, i++) {
            ctx_t sc;
            sub_ctx(&sc, c, ".mig[%d]", i);
            if (apply_gpu_instance(&sc, e, g, index)) return -1;
        }
        if (mig->child && !mig_mode_given) g->mig_mode = g->mig_pending = 1;
        g->generation = ++g_sim.generation;
    }
    return 0;
}

/* ------------------------------------------------------------------ top level */

static int apply_init_failure(const ctx_t *c, const sj_node *obj) {
    if (want(c, obj, SJ_OBJ)) return -1;
    int code = NVML_ERROR_DRIVER_NOT_LOADED;
    long long count = -1;
    double until = -1;
    for (const sj_node *m = obj->child; m; m = m->next) {
        double v;
        if (strcmp(m->key, "code") == 0) {
            if (get_return_code(c, m, &code)) return -1;
        } else if (strcmp(m->key, "count") == 0) {
            if (get_number(c, m, 0, 1e12, &v)) return -1;
            count = (long long)v;
        } else if (strcmp(m->key, "until_s") == 0) {
            if (get_number(c, m, 0, 1e12, &v)) return -1;
            until = v;
        } else {
            return err_at(c, m, "unknown key \"%s\" in init_failure (expected code, count, "
                          "until_s)", m->key);
        }
    }
    g_sim.init_fail_code = code;
    g_sim.init_fail_remaining = count;
    g_sim.init_fail_until = until;
    return 0;
}

static int apply_xid_events(const ctx_t *c, const sj_node *arr) {
    if (want(c, arr, SJ_ARR)) return -1;
    int i = 0;
    for (const sj_node *e = arr->child; e; e = e->next, i++) {
        ctx_t sc;
        sub_ctx(&sc, c, "xid_events[%d]", i);
        if (want(&sc, e, SJ_OBJ)) return -1;
        double gpu = -1, xid = -1, at = 0, gi = SIM_NO_ID, ci = SIM_NO_ID;
        for (const sj_node *m = e->child; m; m = m->next) {
            double *dst = strcmp(m->key, "gpu") == 0   ? &gpu
                          : strcmp(m->key, "xid") == 0 ? &xid
                          : strcmp(m->key, "at_s") == 0 ? &at
                          : strcmp(m->key, "gi") == 0  ? &gi
                          : strcmp(m->key, "ci") == 0  ? &ci
                                                       : NULL;
            if (!dst)
                return err_at(&sc, m, "unknown key \"%s\" (expected gpu, xid, at_s, gi, ci)",
                              m->key);
            if (get_number(&sc, m, 0, 1.8e19, dst)) return -1;
        }
        if (gpu < 0 || xid < 0) return err_at(&sc, e, "an XID event needs \"gpu\" and \"xid\"");
        if (gpu >= g_sim.ngpus) return err_at(&sc, e, "gpu %g does not exist", gpu);
        if (sim_queue_xid((int)gpu, (unsigned long long)xid, (unsigned)gi, (unsigned)ci, at))
            return err_at(&sc, e, "too many pending XID events");
    }
    return 0;
}

int sim_add_hang(const char *function, int gpu, double at, double for_s) {
    int fn = sim_function_index(function);
    if (fn < 0) {
        sim_set_error("hang: \"%s\" is not a function this library exports",
                      function ? function : "(null)");
        return -1;
    }
    if (fn == FN_nvmlErrorString) {
        sim_set_error("hang: nvmlErrorString cannot hang (it only names a code)");
        return -1;
    }
    if (gpu >= (int)g_sim.ngpus) {
        sim_set_error("hang: GPU %d does not exist (%u devices)", gpu, g_sim.ngpus);
        return -1;
    }
    if (!(at >= 0 && at <= 1e12) || !(for_s >= 0 && for_s <= 1e6)) {
        sim_set_error("hang: at_s must be in [0, 1e12] and for_s in [0, 1e6] seconds");
        return -1;
    }
    if (g_sim.nhangs >= SIM_MAX_HANGS) {
        sim_set_error("hang: more than %d hangs", SIM_MAX_HANGS);
        return -1;
    }
    sim_hang *h = &g_sim.hangs[g_sim.nhangs++];
    h->fn = fn;
    h->gpu = gpu < 0 ? -1 : gpu;
    h->at = at;
    h->for_s = for_s;
    return 0;
}

static int apply_one_hang(const ctx_t *c, const sj_node *obj) {
    if (want(c, obj, SJ_OBJ)) return -1;
    const char *function = NULL;
    double gpu = -1, at = 0, for_s = -1;
    for (const sj_node *m = obj->child; m; m = m->next) {
        if (strcmp(m->key, "function") == 0) {
            if (want(c, m, SJ_STR)) return -1;
            function = m->str;
            continue;
        }
        double *dst = strcmp(m->key, "device") == 0  ? &gpu
                      : strcmp(m->key, "at_s") == 0  ? &at
                      : strcmp(m->key, "for_s") == 0 ? &for_s
                                                     : NULL;
        if (!dst)
            return err_at(c, m, "unknown key \"%s\" in hang (expected function, device, at_s, "
                          "for_s)", m->key);
        if (get_number(c, m, 0, strcmp(m->key, "for_s") == 0 ? 1e6 : 1e12, dst)) return -1;
        if (dst == &gpu && gpu != floor(gpu))
            return err_at(c, m, "\"device\" must be a GPU index");
    }
    if (!function || for_s < 0)
        return err_at(c, obj, "a hang needs \"function\" and \"for_s\"");
    if (sim_add_hang(function, (int)gpu, at, for_s)) {
        char why[sizeof g_sim.last_error];
        memcpy(why, g_sim.last_error, sizeof why);
        return err_at(c, obj, "%s", strncmp(why, "hang: ", 6) == 0 ? why + 6 : why);
    }
    return 0;
}

/* "hang": one object, or a list of them. */
static int apply_hangs(const ctx_t *c, const sj_node *node) {
    if (node->type == SJ_OBJ) {
        ctx_t sc;
        sub_ctx(&sc, c, "hang");
        return apply_one_hang(&sc, node);
    }
    if (node->type != SJ_ARR)
        return err_at(c, node, "\"hang\" must be an object or a list of objects");
    int i = 0;
    for (const sj_node *e = node->child; e; e = e->next, i++) {
        ctx_t sc;
        sub_ctx(&sc, c, "hang[%d]", i);
        if (apply_one_hang(&sc, e)) return -1;
    }
    return 0;
}

static int apply_scenario(const ctx_t *c, const sj_node *root) {
    if (want(c, root, SJ_OBJ)) return -1;
    const sj_node *devices = NULL, *defaults = NULL, *xids = NULL, *count = NULL, *hangs = NULL;
    for (const sj_node *m = root->child; m; m = m->next) {
        double v;
        if (strcmp(m->key, "devices") == 0) {
            if (want(c, m, SJ_ARR)) return -1;
            devices = m;
        } else if (strcmp(m->key, "device_defaults") == 0) {
            if (want(c, m, SJ_OBJ)) return -1;
            defaults = m;
        } else if (strcmp(m->key, "device_count") == 0) {
            if (get_number(c, m, 0, SIM_MAX_GPUS, &v)) return -1;
            count = m;
        } else if (strcmp(m->key, "xid_events") == 0) {
            xids = m;
        } else if (strcmp(m->key, "hang") == 0) {
            hangs = m;
        } else if (strcmp(m->key, "driver_version") == 0) {
            if (get_string(c, m, g_sim.driver_version, sizeof g_sim.driver_version)) return -1;
        } else if (strcmp(m->key, "nvml_version") == 0) {
            if (get_string(c, m, g_sim.nvml_version, sizeof g_sim.nvml_version)) return -1;
        } else if (strcmp(m->key, "clock") == 0) {
            if (want(c, m, SJ_STR)) return -1;
            if (strcmp(m->str, "manual") == 0) g_sim.manual = 1;
            else if (strcmp(m->str, "real") == 0) g_sim.manual = 0;
            else return err_at(c, m, "clock must be \"real\" or \"manual\", not \"%s\"", m->str);
        } else if (strcmp(m->key, "clock_speed") == 0) {
            if (get_number(c, m, 1e-3, 1e6, &g_sim.speed)) return -1;
        } else if (strcmp(m->key, "start_time_s") == 0) {
            if (get_number(c, m, 0, 1e12, &g_sim.t_start)) return -1;
        } else if (strcmp(m->key, "init_failure") == 0) {
            if (apply_init_failure(c, m)) return -1;
        } else if (strcmp(m->key, "return_codes") == 0) {
            if (apply_return_codes(c, m, g_sim.override_all)) return -1;
        } else {
            return err_at(c, m, "unknown scenario key \"%s\" (expected devices, device_count, "
                          "device_defaults, driver_version, nvml_version, clock, clock_speed, "
                          "start_time_s, init_failure, return_codes, xid_events, hang)",
                          m->key);
        }
    }
    unsigned listed = 0;
    if (devices)
        for (const sj_node *e = devices->child; e; e = e->next) listed++;
    unsigned n = count ? (unsigned)count->num : (devices ? listed : 1);
    if (count && n < listed)
        return err_at(c, count, "device_count %u is smaller than the %u devices listed", n,
                      listed);
    if (n > SIM_MAX_GPUS) return err_at(c, devices, "more than %d devices", SIM_MAX_GPUS);
    g_sim.ngpus = n;
    for (unsigned i = 0; i < n; i++) {
        if (defaults) {
            ctx_t sc;
            sub_ctx(&sc, c, "device_defaults");
            if (apply_device(&sc, defaults, i)) return -1;
        }
    }
    if (devices) {
        unsigned i = 0;
        for (const sj_node *e = devices->child; e; e = e->next, i++) {
            ctx_t sc;
            sub_ctx(&sc, c, "devices[%u]", i);
            if (apply_device(&sc, e, i)) return -1;
        }
    }
    g_sim.t_manual = g_sim.last_t = g_sim.t_start;
    if (xids && apply_xid_events(c, xids)) return -1;
    if (hangs && apply_hangs(c, hangs)) return -1;
    return 0;
}

static void restore_kept(const sim_state *kept) {
    g_sim.init_refcount = kept->init_refcount;
    memcpy(g_sim.sets, kept->sets, sizeof g_sim.sets);
    memcpy(g_sim.calls, kept->calls, sizeof g_sim.calls);
    g_sim.generation = kept->generation + 1;
}

int sim_load_scenario_text(const char *text, const char *origin) {
    char perr[256];
    sj_node *root = sj_parse(text, perr, sizeof perr);
    if (!root) {
        sim_set_error("%s: %s", origin, perr);
        return -1;
    }
    /* Keep what the process already holds (the init refcount, event sets) and the call
     * counts, which a test reads across scenario changes. */
    static sim_state kept; /* large: not on the stack; callers hold the lock */
    memcpy(&kept, &g_sim, sizeof kept);
    sim_reset_state();
    restore_kept(&kept);
    ctx_t c = {origin, ""};
    int rc = apply_scenario(&c, root);
    sj_free(root);
    if (rc) {
        char saved[sizeof g_sim.last_error];
        memcpy(saved, g_sim.last_error, sizeof saved);
        sim_reset_state();
        restore_kept(&kept);
        memcpy(g_sim.last_error, saved, sizeof saved);
        return -1;
    }
    for (unsigned i = 0; i < SIM_MAX_GPUS; i++) g_sim.gpus[i].generation = ++g_sim.generation;
    g_sim.loaded = 1;
    return 0;
}

int sim_patch_device_text(unsigned gpu, const char *text) {
    if (gpu >= g_sim.ngpus) {
        sim_set_error("patch: GPU %u does not exist (%u devices)", gpu, g_sim.ngpus);
        return -1;
    }
    char perr[256];
    sj_node *root = sj_parse(text, perr, sizeof perr);
    if (!root) {
        sim_set_error("patch: %s", perr);
        return -1;
    }
    /* Apply to a copy so a bad patch leaves the device untouched. */
    sim_gpu saved = g_sim.gpus[gpu];
    int saved_over[SIM_FN_COUNT];
    memcpy(saved_over, g_sim.override_gpu[gpu], sizeof saved_over);
    ctx_t c = {"patch", ""};
    snprintf(c.path, sizeof c.path, "devices[%u]", gpu);
    sim_sync();
    int rc = apply_device(&c, root, gpu);
    sj_free(root);
    if (rc) {
        g_sim.gpus[gpu] = saved;
        memcpy(g_sim.override_gpu[gpu], saved_over, sizeof saved_over);
    }
    return rc;
}

int sim_set_device_value(unsigned gpu, const char *key, double value) {
    if (gpu >= g_sim.ngpus) {
        sim_set_error("set_value: GPU %u does not exist (%u devices)", gpu, g_sim.ngpus);
        return -1;
    }
    if (key && (strncmp(key, "fi:", 3) == 0 || strncmp(key, "call:", 5) == 0)) {
        if (sim_value_set(&g_sim.gpus[gpu], key, value)) {
            sim_set_error("set_value: no room for \"%s\"", key);
            return -1;
        }
        return 0;
    }
    const numkey *k = find_key(k_gpu_keys, sizeof k_gpu_keys / sizeof k_gpu_keys[0], key);
    if (!k) {
        sim_set_error("set_value: unknown device key \"%s\"", key ? key : "(null)");
        return -1;
    }
    sim_sync(); /* rates change from now on, not retroactively */
    const char *problem = store_number(&g_sim.gpus[gpu], k, value);
    if (problem) {
        sim_set_error("set_value: \"%s\" = %g: %s", key, value, problem);
        return -1;
    }
    return 0;
}
