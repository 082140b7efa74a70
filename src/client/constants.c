/*
 * client/constants.c - the library's public constants by name, for bindings.
 *
 * A binding (python/comem) must not copy a number from the headers: it asks
 * comem_constant("EBUSY") and gets this build's value, so a header that moves
 * moves the binding with it. Names are the headers' without their COMEM_
 * prefix, and a record's layout is its size and its fields' offsets
 * ("ADMISSION_SIZE", "ADMISSION_OFFSET_GRANT"), which a binding's copy of the
 * record is checked against when it loads. The table is the only list; a name
 * not in it is reported as such.
 */
#include <stddef.h>
#include <string.h>

#include "arith/reserve.h"
#include "comem/calc.h"
#include "comem/comem.h"
#include "comem/pager.h"
#include "wire/wire.h"

typedef struct constant {
    const char *name;
    int64_t value;
} constant;

#define C(n) {#n, COMEM_##n}
#define F(N, field) {"ADMISSION_OFFSET_" #N, offsetof(comem_admission, field)}

static const constant k_constants[] = {
    /* statuses */
    C(OK), C(EINVAL), C(ENOMEM), C(ENODEV), C(EIO), C(ETIMEDOUT), C(EPROTO), C(EPERM), C(EBUSY), C(ENOSPC),
    C(ENOENT), C(ECLOSED), C(ENOTSUP), C(EDRIVER), C(EEXIST), C(ERANGE), C(EFORKED), C(EVERSION),
    /* roles, open flags, holder kinds and answers, ask kinds, entry flags */
    C(CLIENT_HOST), C(CLIENT_WORKER), C(CLIENT_TOOL), C(OPEN_EMBED), C(OPEN_NO_LOCAL),
    C(KIND_MODELS), C(KIND_PAGER), C(KIND_PINS), C(KIND_RAW),
    C(ANSWERS_RELEASE), C(ANSWERS_IDLE), C(ANSWERS_PINS), C(RELEASES_WHILE_BUSY),
    C(RELEASE_BYTES), C(RELEASE_IDLE), C(RELEASE_PINS),
    C(ENTRY_PAGED), C(ENTRY_RAM_CACHE), C(ENTRY_RAM_FILE),
    /* the pager: backends, a fault's answers, the default page, its counters' indices */
    C(PAGER_SIM), C(PAGER_CUDA), C(VBAR_RESIDENT), C(VBAR_OFFLOADED), C(PAGER_DEFAULT_PAGE_SIZE),
    C(PAGER_STAT_FAULTS), C(PAGER_STAT_OFFLOADED), C(PAGER_STAT_COMMITS), C(PAGER_STAT_EVICTIONS),
    C(PAGER_STAT_SYNCS), C(PAGER_STAT_TRANSIENT_RETRIES), C(PAGER_STAT_PRESSURE_RETRIES), C(PAGER_STAT_POLLS),
    C(PAGER_STAT_RELEASE_ASKS), C(PAGER_STAT_REPORTS), C(PAGER_STAT_TOUCHES), C(PAGER_STAT_IDLE_DECLINED),
    C(PAGER_STAT_KEPT), C(PAGER_STAT_REUSED), C(PAGER_STAT_COUNT),
    /* comem_admission's layout: a binding's copy of the record is checked against these */
    {"ADMISSION_SIZE", sizeof(comem_admission)}, C(ADMISSION_ASKED_MAX),
    F(GRANT, grant), F(SHORT_BY, short_by), F(FITS, fits), F(NEED, need), F(FREE_BEFORE, free_before),
    F(FREE_AFTER, free_after), F(FREED, freed), F(DECIDED, decided), F(N_ASKED, n_asked), F(N_BUSY, n_busy),
    F(N_IDS, n_ids), F(ASKED, asked),
    /* bounds */
    C(MAX_DEVICES), C(DEVICE_HOST_RAM),
    {"MAX_KEEP", COMEM_WIRE_MAX_ITEMS},        /* entries one admission may keep */
    {"NAME_MAX", COMEM_WIRE_NAME_MAX - 1},     /* bytes of a name, its terminator left out */
    /* the rules (comem/calc.h): ComfyUI's versions, VRAM states, the CPU, flags, budget kinds, pin bits */
    C(COMFYUI_CURRENT), C(COMFYUI_A125CD84), C(COMFYUI_783545F6), C(COMFYUI_V039),
    C(CALC_VRAM_DISABLED), C(CALC_VRAM_NO), C(CALC_VRAM_LOW), C(CALC_VRAM_NORMAL), C(CALC_VRAM_HIGH),
    C(CALC_VRAM_SHARED), C(CALC_CPU), C(CALC_DYNAMIC), C(CALC_KEEP), C(CALC_DEAD),
    C(CALC_LOAD_DEVICE_CPU), C(CALC_NO_LOWVRAM), C(CALC_FORCE_FULL_LOAD),
    C(CALC_BUDGET_FULL), C(CALC_BUDGET_NOTHING), C(CALC_BUDGET_BYTES),
    C(CALC_DEVICE_NONE), C(CALC_FOR_DYNAMIC), C(CALC_NO_SMART_MEMORY),
    C(CALC_PINS_WEIGHTS), C(CALC_PINS_PATCHES), C(CALC_PINS_WEIGHTS_LOADED), C(CALC_PINS_PATCHES_LOADED),
    C(CALC_PINS_WEIGHTS_FAST), C(CALC_PINS_PATCHES_FAST),
    C(CALC_PIN_MODEL_DYNAMIC), C(CALC_PIN_MODEL_ACTIVE), C(CALC_PIN_MODEL_CURRENT_PROMPT),
    C(CALC_PIN_HIGH_RAM), C(CALC_PIN_FAST_DISK), C(CALC_PIN_LOADED), C(CALC_PIN_EVICT_ACTIVE),
    C(RESERVE_DEFAULT), /* EXTRA_RESERVED_VRAM where nothing changes it: 400 MiB */
    /* the protocol a coordinator speaks (comem_probe_peer names another's), and comemd's lost start */
    C(WIRE_MAGIC), C(WIRE_VERSION), C(COMEMD_EXIT_TAKEN),
};

#undef C
#undef F

int64_t comem_constant(const char *name, int *found)
{
    for (size_t i = 0; name && i < sizeof k_constants / sizeof k_constants[0]; i++)
        if (!strcmp(k_constants[i].name, name)) {
            if (found)
                *found = 1;
            return k_constants[i].value;
        }
    if (found)
        *found = 0;
    return 0;
}

int comem_device_host_ram(void) { return COMEM_DEVICE_HOST_RAM; }
