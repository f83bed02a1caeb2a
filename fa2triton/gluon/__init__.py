"""v7's Hopper (sm_90) kernels written in Gluon: the warp-specialized forward (host side gluon_forward_hopper, kernel
gluon_kernel, configurations gluon_configs, PTX passes gluon_ptx), the two backwards (gluon_backward_hopper,
gluon_backward_ws) and the helpers they share (hopper). Their work logs: docs/worklogs/."""
