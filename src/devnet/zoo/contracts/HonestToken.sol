// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import {ZooERC20} from "./ZooERC20.sol";

/// A plain ERC-20: fixed supply, no privileged functions. The zoo renounces its ownership once
/// the pool is seeded, so nobody controls it. The zoo's `no-liquidity` token is this same
/// contract without a pool.
contract HonestToken is ZooERC20 {
    constructor(string memory name_, string memory symbol_, uint256 supply) {
        _init(name_, symbol_, supply, msg.sender);
    }
}
