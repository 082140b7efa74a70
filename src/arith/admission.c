/* arith/admission.c - extra_mem, mmr, first free target and per-device sums. */
#include "arith/admission.h"

#include "arith/reserve.h"
#include "base/bytes.h"
#include "comem/common.h"

void comem_admission_targets_compute(double memory_required, bool has_minimum,
                                     double minimum_memory_required, double reserve,
                                     comem_admission_targets *out)
{
    double inference = comem_minimum_inference_memory(reserve);
    out->inference = inference;
    out->extra_mem = comem_fmax(inference, memory_required + reserve);
    out->mmr = has_minimum ? comem_fmax(inference, minimum_memory_required + reserve) : out->extra_mem;
}

double comem_admission_free_target(double need, double extra_mem)
{
    return need * 1.1 + extra_mem;
}

bool comem_admission_needs_second_pass(double free_now, double mmr) { return free_now < mmr; }

int comem_admission_needs(const comem_load_model *models, size_t n, comem_device_need *out,
                          size_t cap, size_t *n_out, bool *free_for_dynamic)
{
    size_t rows = 0;
    bool all_dynamic = true;
    for (size_t i = 0; i < n; i++) {
        const comem_load_model *m = &models[i];
        if (!m->dynamic)
            all_dynamic = false;
        size_t r = 0;
        while (r < rows && out[r].device != m->load_device)
            r++;
        if (r == rows) {
            if (rows == cap)
                return COMEM_ERANGE;
            out[rows++] = (comem_device_need){.device = m->load_device, .need = 0, .pins = 0};
        }
        /* model_memory_required(): only the offloaded part if it already lives there */
        int64_t required = (m->load_device == m->current_device) ? comem_sub(m->size, m->loaded) : m->size;
        out[r].need = comem_add(out[r].need, required);
        if (!m->dynamic)
            out[r].pins = comem_add(out[r].pins, m->size);
    }
    *n_out = rows;
    *free_for_dynamic = all_dynamic;
    return COMEM_OK;
}

int comem_admission_load_order(const uint64_t *ids, size_t n, size_t *order, size_t *n_order)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        bool seen = false;
        for (size_t k = 0; k < m && !seen; k++)
            seen = ids[order[k]] == ids[i];
        if (!seen)
            order[m++] = i;
    }
    for (size_t a = 0, b = m; a + 1 < b; a++, b--) { /* models.reverse() */
        size_t t = order[a];
        order[a] = order[b - 1];
        order[b - 1] = t;
    }
    *n_order = m;
    return COMEM_OK;
}
