/* NVLink port registers through PRM, and NVLink P2P status, from a GPU's "calls" values (see
 * README.md):
 *   "nvmlDeviceReadWritePRM_v1(<link>,<group>).<member>"   a PPCNT counter of one link, the
 *                                                          group in decimal (26 = 0x1A)
 *   "nvmlDeviceReadPRMCounters_v1(<link>,<counter id>)"    one PRM counter of one link
 * The PPCNT query is checked word by word against the register access NVML documents
 * (operation TLV: query of register 0x5008; register TLV of the group's size; PPCNT header
 * with local port = link + 1): a request packed any other way gets a reply whose operation
 * status is BAD_TLV (3), with no counters, as the firmware answers it. A link with none of
 * its group's members set answers NOT_SUPPORTED. Counters are written big-endian. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "sim_state.h"

typedef struct {
    const char *name;
    unsigned offset, width; /* in the reply's bytes */
} member;

typedef struct {
    unsigned group, size; /* the PPCNT group and its register size in bytes */
    member members[8];
} group_layout;

static const group_layout GROUPS[] = {
    {0x1A, 244, {{"total_successful_recovery_events", 28, 4},
                 {"time_since_last_recovery", 104, 4},
                 {"time_between_last_2_recoveries", 118, 2}}},
    {0x12, 248, {{"link_down_events", 220, 4}, {"successful_recovery_events", 224, 4}}},
    {0x22, 248, {{"plr_rcv_codes", 28, 8}, {"plr_rcv_code_err", 36, 8},
                 {"plr_rcv_uncorrectable_code", 44, 8}, {"plr_xmit_codes", 52, 8},
                 {"plr_xmit_retry_codes", 60, 8}, {"plr_xmit_retry_events", 68, 8},
                 {"plr_sync_events", 76, 8}}},
};

static unsigned word(const unsigned char *p) {
    return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3];
}

static void put(unsigned char *p, unsigned long long v, unsigned width) {
    for (unsigned i = 0; i < width; i++) p[i] = (unsigned char)(v >> (8 * (width - 1 - i)));
}

static int link_usable(const sim_gpu *g, unsigned link) {
    return link < g->nvlink_links && !sim_mig_active(g);
}

/* The group a well-formed PPCNT query asks for, and its link; NULL for any other request. */
static const group_layout *parse_query(const nvmlPRMTLV_v1_t *b, unsigned *link) {
    const unsigned char *d = b->inData;
    unsigned ppcnt = word(d + 20);
    for (size_t i = 0; i < sizeof GROUPS / sizeof GROUPS[0]; i++) {
        const group_layout *l = &GROUPS[i];
        if ((ppcnt & 0x3F) != l->group) continue;
        if (b->dataSize != 16 + 4 + l->size || word(d) != 0x08040000u ||
            word(d + 4) != 0x50080101u || word(d + 8) || word(d + 12) ||
            word(d + 16) != (3u << 27 | (l->size / 4 + 1) << 16) ||
            (ppcnt & ~(0xFFu << 16 | 0x3Fu)) || word(d + 24))
            return NULL;
        unsigned port = ppcnt >> 16 & 0xFF;
        if (port < 1) return NULL;
        *link = port - 1;
        return l;
    }
    return NULL;
}

nvmlReturn_t nvmlDeviceReadWritePRM_v1(nvmlDevice_t device, nvmlPRMTLV_v1_t *buffer) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = sim_begin_device(FN_nvmlDeviceReadWritePRM_v1, device, 1, &g, &slot);
    if (r != NVML_SUCCESS) return sim_finish(r);
    if (!buffer || buffer->dataSize > NVML_PRM_DATA_MAX_SIZE)
        return sim_finish(NVML_ERROR_INVALID_ARGUMENT);
    unsigned link = 0;
    const group_layout *l = parse_query(buffer, &link);
    unsigned char *out = buffer->outData;
    if (!l) {
        out[2] = 3; /* BAD_TLV */
        return sim_finish(NVML_SUCCESS);
    }
    if (!link_usable(g, link)) return sim_finish(NVML_ERROR_NOT_SUPPORTED);
    sim_number values[8];
    int any = 0;
    for (int i = 0; i < 8 && l->members[i].name; i++) {
        char key[SIM_VALUE_KEY];
        snprintf(key, sizeof key, "call:nvmlDeviceReadWritePRM_v1(%u,%u).%s", link, l->group,
                 l->members[i].name);
        values[i] = 0;
        if (!sim_value_get(g, key, &values[i])) any = 1;
    }
    if (!any) return sim_finish(NVML_ERROR_NOT_SUPPORTED);
    memset(out + 28, 0, NVML_PRM_DATA_MAX_SIZE - 28);
    out[6] |= 0x80; /* the r bit (bit 15 of the second word): a response */
    for (int i = 0; i < 8 && l->members[i].name; i++)
        put(out + l->members[i].offset, (unsigned long long)values[i], l->members[i].width);
    buffer->status = 0;
    return sim_finish(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceReadPRMCounters_v1(nvmlDevice_t device,
                                          nvmlPRMCounterList_v1_t *counterList) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = sim_begin_device(FN_nvmlDeviceReadPRMCounters_v1, device, 1, &g, &slot);
    if (r != NVML_SUCCESS) return sim_finish(r);
    if (!counterList || !counterList->counters) return sim_finish(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < counterList->numCounters; i++) {
        nvmlPRMCounter_v1_t *c = &counterList->counters[i];
        /* PORT_XMIT_WAIT (201) is addressed by the link index, the others by index + 1 */
        unsigned port = c->inData.localPort;
        unsigned link = c->counterId == 201 ? port : port - 1;
        char key[SIM_VALUE_KEY];
        sim_number v;
        snprintf(key, sizeof key, "call:nvmlDeviceReadPRMCounters_v1(%u,%u)", link,
                 c->counterId);
        memset(&c->counterValue, 0, sizeof c->counterValue);
        if ((c->counterId != 201 && port < 1) || !link_usable(g, link) ||
            sim_value_get(g, key, &v)) {
            c->counterValue.status = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        c->counterValue.outputType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        c->counterValue.outputValue.ullVal = (unsigned long long)v;
    }
    return sim_finish(NVML_SUCCESS);
}

/* NVLink P2P status towards another GPU: "nvmlDeviceGetP2PStatus(<peer index>,<caps index>)"
 * on the first GPU; unset: NOT_SUPPORTED (the call). A lost peer answers GPU_IS_LOST. */
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex,
                                    nvmlGpuP2PStatus_t *p2pStatus) {
    sim_gpu *g;
    int slot;
    nvmlReturn_t r = sim_begin_device(FN_nvmlDeviceGetP2PStatus, device1, 1, &g, &slot);
    if (r != NVML_SUCCESS) return sim_finish(r);
    if (!device2 || !p2pStatus || device2->slot >= 0 || device2->gpu < 0 ||
        (unsigned)device2->gpu >= g_sim.ngpus || &g_sim.gpus[device2->gpu] == g)
        return sim_finish(NVML_ERROR_INVALID_ARGUMENT);
    if (sim_peer_lost(&g_sim.gpus[device2->gpu])) return sim_finish(NVML_ERROR_GPU_IS_LOST);
    char key[SIM_VALUE_KEY];
    sim_number v;
    snprintf(key, sizeof key, "call:nvmlDeviceGetP2PStatus(%d,%d)", device2->gpu, (int)p2pIndex);
    if (sim_value_get(g, key, &v)) return sim_finish(NVML_ERROR_NOT_SUPPORTED);
    *p2pStatus = (nvmlGpuP2PStatus_t)v;
    return sim_finish(NVML_SUCCESS);
}
