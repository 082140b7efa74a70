/*
 * tools/comem/demo.c - a narrated admission on a simulated 24 GiB card.
 *
 * ComfyUI's worked example V10: a VAE (300 MiB) and a CLIP (2 GiB) are
 * resident, 6 GiB is free, and a 6 GiB UNet arrives with 1 GiB of inference
 * memory. Every figure printed comes from the arith/ functions.
 */
#include <math.h>
#include <stdio.h>

#include "arith/admission.h"
#include "arith/evict.h"
#include "arith/lowvram.h"
#include "arith/reserve.h"
#include "base/bytes.h"
#include "base/size.h"
#include "cmds.h"

typedef struct card {
    double free;
    comem_evict_entry *models;
    double freed_by[2]; /* bytes each model gave back */
} card;

static double card_free(void *u) { return ((card *)u)->free; }

/* A model of ComfyUI's partial unload: 64 MiB modules, over-freeing by the buffer growth. */
static double card_partial(void *u, size_t i, double to_free)
{
    card *c = u;
    const double module = 64.0 * 1024 * 1024, buffer = 3 * module;
    double freed = 0;
    while (!(freed > to_free + buffer) && freed < (double)c->models[i].loaded)
        freed += module;
    c->models[i].loaded -= (int64_t)freed;
    c->free += freed;
    c->freed_by[i] += freed;
    return freed;
}

static void card_detach(void *u, size_t i)
{
    card *c = u;
    c->free += (double)c->models[i].loaded;
    c->freed_by[i] += (double)c->models[i].loaded;
    c->models[i].loaded = 0;
}

static const char *b(double v, char *buf) { return comem_format_bytes(comem_trunc(v), buf, 32); }

int cmd_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    char b1[32], b2[32], b3[32];
    comem_evict_entry models[] = {
        {.size = 300 * COMEM_MIB, .loaded = 300 * COMEM_MIB, .refs = 2, .device = 0},
        {.size = 2 * COMEM_GIB, .loaded = 2 * COMEM_GIB, .refs = 2, .device = 0},
    };
    const char *names[] = {"VAE", "CLIP"};
    card c = {.free = 6.0 * (double)COMEM_GIB, .models = models};

    printf("comem demo: one admission on a simulated 24 GiB Linux card (ComfyUI's vector V10)\n\n");
    comem_reserve_opts ro = {.total_vram_mib = 24 * 1024.0};
    double reserve = comem_extra_reserved_vram(&ro);
    comem_admission_targets t;
    comem_admission_targets_compute(1.0 * (double)COMEM_GIB, false, 0, reserve, &t);
    double target = comem_admission_free_target(6.0 * (double)COMEM_GIB, t.extra_mem);
    printf("  reserve %s, minimum inference %s\n", b(reserve, b1), b(t.inference, b2));
    printf("  loading a 6 GiB UNet with 1 GiB of inference memory: free target %.1f B (%s)\n", target, b(target, b3));
    printf("  resident: VAE 300 MiB (index 0, newest), CLIP 2 GiB (index 1); free %s\n\n", b(c.free, b1));

    comem_evict_request req = {.required = target, .device = 0, .smart_memory = true};
    comem_evict_ops ops = {.free_now = card_free, .partial = card_partial, .detach = card_detach, .user = &c};
    size_t order[2];
    comem_evict_action actions[2];
    comem_evict_result res;
    if (comem_evict_run(&req, models, 2, &ops, order, actions, &res) != 0)
        return 1;
    for (size_t k = 0; k < res.n_actions; k++) {
        const comem_evict_action *a = &actions[k];
        printf("  evict %-4s asked %.1f B -> %s, freed %s\n", names[a->entry], a->asked,
               a->kind == COMEM_EVICT_PARTIAL ? "partial unload, stays listed" : "detached",
               b(c.freed_by[a->entry], b1));
    }
    printf("\n  free now %s; second pass needed: %s\n", b(c.free, b1),
           comem_admission_needs_second_pass(c.free, t.mmr) ? "yes" : "no");

    comem_lowvram_in lin = {.vram_state = COMEM_VRAM_NORMAL, .lowvram_available = true, .free = c.free,
                            .mmr = t.mmr, .inference = t.inference, .ratio = COMEM_WEIGHT_RATIO_NVIDIA};
    comem_budget bud = comem_lowvram_budget(&lin);
    printf("  lowvram budget %.0f B (%s): %s\n", bud.value, b(bud.value, b1),
           bud.value > 6.0 * (double)COMEM_GIB ? "above the model's size, so it loads fully" : "a partial load");
    char exact[40];
    printf("\nTry it yourself: build/bin/comem calc evict --required %s --free 6GiB \\\n"
           "    --entry size=300MiB,loaded=300MiB,refs=2 --entry size=2GiB,loaded=2GiB,refs=2\n",
           comem_format_double(target, exact, sizeof exact));
    return 0;
}
