/* Small instances of every library operator, shared by the tests that build them. */
#ifndef TESSERA_TESTS_OP_CASES_H
#define TESSERA_TESTS_OP_CASES_H

static const struct {
    const char *op, *params;
} cases[] = {
    {"matmul", "m=9,n=13,k=7"},
    {"matmul", "m=8,n=16,k=12,trans_a=1,trans_b=1"},
    {"batch_matmul", "b=2,m=5,n=6,k=4"},
    {"matmul_integer", "m=5,n=7,k=9,a_zero=3,b_zero=-2"},
    {"qlinear_matmul", "m=6,n=5,k=8,a_zero=128,b_zero=1,y_zero=7,shift=6"},
    {"dense_bias", "m=6,n=10,k=5"},
    {"conv2d", "n=1,c=3,h=7,w=6,oc=4,kh=3,kw=3,pad=1"},
    {"conv2d", "n=1,c=4,h=7,w=7,oc=4,kh=3,kw=2,stride=2,dilation=1,groups=2,layout=NHWC"},
    {"depthwise_conv2d", "n=1,c=3,h=6,w=6,kh=3,kw=3,pad=1"},
    {"max_pool2d", "n=1,c=2,h=6,w=7,kh=2,kw=2,stride=2"},
    {"avg_pool2d", "n=1,c=2,h=5,w=5,kh=3,kw=3,pad=1"},
    {"pad", "n=1,c=2,h=4,w=3,pad=1"},
    {"softmax", "m=5,n=9"},
    {"layer_norm", "m=4,n=12"},
    {"layer_norm_welford", "m=4,n=13"},
    {"softmax_online", "m=5,n=11"},
    {"argmax", "m=5,n=10"},
    {"argmin", "m=5,n=10"},
    {"rms_norm", "m=3,n=10"},
    {"relu", "m=5,n=7"},
    {"gelu", "m=4,n=9"},
    {"gelu_tanh", "m=3,n=11"},
    {"silu", "m=6,n=5"},
    {"sigmoid", "m=5,n=8"},
    {"tanh", "m=7,n=3"},
    {"add", "m=5,n=6,bcast=1"},
    {"sub", "m=3,n=5,bcast=1"},
    {"mul", "m=4,n=6"},
    {"div", "m=4,n=7"},
    {"minimum", "m=5,n=4"},
    {"maximum", "m=3,n=9,bcast=1"},
    {"transpose", "m=5,n=6"},
    {"sum", "m=4,n=9"},
    {"matmul_bias_act", "m=6,n=10,k=5,act=gelu"},
    {"mlp_gate", "m=6,n=10,k=8"},
    {"conv2d_bn_relu", "n=1,c=3,h=5,w=5,oc=4,kh=3,kw=3,pad=1"},
    {"qkv_projection", "m=5,n=6,k=7"},
    {"concat", "m=4,n=3,k=5"},
    {"split", "m=3,n=7,parts=3"},
    {"slice", "m=4,n=9,start=-2,end=-100,step=-3"},
    {"gather", "m=6,n=5,k=4"},
    {"where", "m=4,n=6"},
    {"expand", "m=5,n=3"},
    {"log_softmax", "m=4,n=9"},
    {"reduce_max", "m=5,n=7"},
    {"reduce_l2", "m=3,n=8"},
    {"attention", "batch=1,heads=2,lq=5,lk=7,dh=4,mask=causal"},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

#endif
