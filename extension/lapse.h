/*
 * lapse.h — the lapse waker (lapse.c): a background worker that announces
 * the end of every session as its close would, while anyone waits.
 */
#ifndef SIMBA_LAPSE_H
#define SIMBA_LAPSE_H

#include "simba.h"

/* simba.lapse_waker: whether simba_waker() starts the waker, and whether it goes on. */
extern bool simba_lapse_waker;

#endif							/* SIMBA_LAPSE_H */
